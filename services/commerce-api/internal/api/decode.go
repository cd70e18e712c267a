package api

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// MaxBodyBytes bounds a request body; a larger body is a 413.
const MaxBodyBytes = 1 << 20

// object is a JSON object being decoded field by field, so that one request
// reports every problem at once (unknown fields, wrong types, missing and
// invalid values) instead of stopping at the first as encoding/json does.
type object struct {
	pointer string
	fields  map[string]json.RawMessage
	taken   map[string]bool
	errs    *ValidationError
}

// readObject reads the request body as one JSON object. A body that is not
// JSON is an error of its own; a JSON value that is not an object is a field
// problem recorded in errs.
func readObject(w http.ResponseWriter, r *http.Request, errs *ValidationError) (*object, error) {
	if err := jsonContent(r); err != nil {
		return nil, err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, err
		}
		return nil, newRequestError(http.StatusBadRequest, "the request body could not be read: "+err.Error())
	}
	if !json.Valid(body) {
		return nil, newRequestError(http.StatusBadRequest, "the request body is not valid JSON")
	}
	return asObject(body, "", errs), nil
}

// jsonContent refuses a body that is not declared application/json. A
// browser can send a cross-site form (text/plain, form-urlencoded,
// multipart) without a CORS preflight, but not application/json.
func jsonContent(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return nil
		}
	}
	return newRequestError(http.StatusUnsupportedMediaType,
		"the request body must be application/json (UTF-8), got Content-Type "+quoteShort(ct))
}

// quoteShort quotes a client-supplied value for a message, cut to a
// readable length.
func quoteShort(s string) string {
	if len(s) > maxPointerBytes {
		s = s[:maxPointerBytes] + "…"
	}
	return strconv.Quote(s)
}

// asObject returns raw as an object, or nil after recording a problem at
// pointer when raw is not a JSON object.
func asObject(raw json.RawMessage, pointer string, errs *ValidationError) *object {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		errs.add(pointerOrRoot(pointer), "must be a JSON object")
		return nil
	}
	return &object{pointer: pointer, fields: fields, taken: map[string]bool{}, errs: errs}
}

// field decodes the required field name into a T, recording a problem saying
// it must be want when it is missing, null or of another type.
func field[T any](o *object, name, want string) (T, bool) {
	var v T
	o.taken[name] = true
	raw, ok := o.fields[name]
	if !ok || string(raw) == "null" {
		o.errs.add(o.at(name), "is required")
		return v, false
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		o.errs.add(o.at(name), "must be "+want)
		return v, false
	}
	return v, true
}

// finish records every field of the object that no one asked for.
func (o *object) finish() {
	var unknown []string
	for name := range o.fields {
		if !o.taken[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		o.errs.add(o.at(name), "is not a known field")
	}
}

func (o *object) at(name string) string {
	return o.pointer + "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(name)
}

func pointerOrRoot(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// intField decodes a required integer field within [lo, hi].
func intField(o *object, name string, lo, hi int64) (int64, bool) {
	v, ok := field[int64](o, name, "an integer")
	if ok && (v < lo || v > hi) {
		o.errs.add(o.at(name), "must be between "+itoa(lo)+" and "+itoa(hi))
		return v, false
	}
	return v, ok
}
