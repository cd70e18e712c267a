// Package eventcontract checks Kafka records against the event contract,
// the AsyncAPI document of pkg/events ([events.AsyncAPI]): for the topics
// what kin-openapi's response validation is for the REST API. Tests use it
// on records that the real services wrote.
//
// A record is checked against the message its topic's channel declares
// (chosen by its ce_type header where the channel has several): its headers
// against the message's headers schema, its value against the payload
// schema when the message's content type is JSON, its key against the
// Kafka binding's key schema, and, where the key schema names a header in
// x-equals-header, the key must equal that header.
package eventcontract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/IBM/sarama"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

// docURL names the document inside the schema compiler (which would take
// a relative name for a file of the working directory).
const docURL = "urn:asyncapi:events"

// Contract is a loaded, compiled AsyncAPI document.
type Contract struct {
	channels map[string][]*Message // by address
	messages map[string]*Message   // by name
}

// Message is one message of the document, compiled.
type Message struct {
	Name        string
	ID          string // the key in components.messages
	ContentType string
	// Examples are the message's examples; LegacyPayload is the payload in
	// the form written before the members were camelCase (x-legacy-payload),
	// nil when the message has none.
	Examples      []Example
	LegacyPayload json.RawMessage

	headers, payload, key *jsonschema.Schema
	binding               string // the name of its components.messageBindings entry
	keyHeader             string // the header the key must equal, if any
}

// Example is one example of a message.
type Example struct {
	Name    string
	Headers map[string]string
	Payload json.RawMessage
}

// Record is a Kafka record as read back. A nil Key means the record has
// none.
type Record struct {
	Topic   string
	Key     []byte
	Headers []Header
	Value   []byte
}

// Header is one record header.
type Header struct{ Key, Value string }

// FromSarama converts a record sarama read.
func FromSarama(m *sarama.ConsumerMessage) Record {
	r := Record{Topic: m.Topic, Key: m.Key, Value: m.Value}
	for _, h := range m.Headers {
		if h != nil {
			r.Headers = append(r.Headers, Header{Key: string(h.Key), Value: string(h.Value)})
		}
	}
	return r
}

// Load parses and compiles an AsyncAPI 3 document (YAML).
func Load(doc []byte) (*Contract, error) {
	var tree any
	if err := yaml.Unmarshal(doc, &tree); err != nil {
		return nil, fmt.Errorf("parse the document: %w", err)
	}
	// The compiler wants the values encoding/json produces.
	js, err := json.Marshal(tree)
	if err != nil {
		return nil, fmt.Errorf("convert the document to JSON: %w", err)
	}
	root, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		return nil, err
	}
	var d struct {
		AsyncAPI           string `json:"asyncapi"`
		DefaultContentType string `json:"defaultContentType"`
		Channels           map[string]struct {
			Address  string                     `json:"address"`
			Messages map[string]json.RawMessage `json:"messages"`
		} `json:"channels"`
		Components struct {
			Messages        map[string]rawMessage `json:"messages"`
			MessageBindings map[string]struct {
				Kafka struct {
					Key struct {
						EqualsHeader string `json:"x-equals-header"`
					} `json:"key"`
				} `json:"kafka"`
			} `json:"messageBindings"`
		} `json:"components"`
	}
	if err := json.Unmarshal(js, &d); err != nil {
		return nil, err
	}
	if d.AsyncAPI != "3.0.0" {
		return nil, fmt.Errorf("asyncapi %q, want 3.0.0", d.AsyncAPI)
	}
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft7) // AsyncAPI's default schema format extends draft 7
	comp.AssertFormat()
	if err := comp.AddResource(docURL, root); err != nil {
		return nil, err
	}
	c := &Contract{channels: map[string][]*Message{}, messages: map[string]*Message{}}
	byID := map[string]*Message{}
	for chID, ch := range d.Channels {
		if ch.Address == "" {
			return nil, fmt.Errorf("channel %s has no address", chID)
		}
		for msgKey, raw := range ch.Messages {
			var ref struct {
				Ref string `json:"$ref"`
			}
			if err := json.Unmarshal(raw, &ref); err != nil {
				return nil, err
			}
			id, ok := strings.CutPrefix(ref.Ref, "#/components/messages/")
			rm, found := d.Components.Messages[id]
			if !ok || !found {
				return nil, fmt.Errorf("channel %s message %s: $ref %q is not a message of components.messages", chID, msgKey, ref.Ref)
			}
			m := byID[id]
			if m == nil {
				if m, err = compileMessage(comp, id, rm, d.DefaultContentType); err != nil {
					return nil, err
				}
				m.keyHeader = d.Components.MessageBindings[m.binding].Kafka.Key.EqualsHeader
				if prev, dup := c.messages[m.Name]; dup {
					return nil, fmt.Errorf("message name %q is used by %s and %s", m.Name, prev.ID, m.ID)
				}
				byID[id], c.messages[m.Name] = m, m
			}
			c.channels[ch.Address] = append(c.channels[ch.Address], m)
		}
	}
	return c, nil
}

type rawMessage struct {
	Name          string            `json:"name"`
	ContentType   string            `json:"contentType"`
	Headers       json.RawMessage   `json:"headers"`
	Payload       json.RawMessage   `json:"payload"`
	LegacyPayload json.RawMessage   `json:"x-legacy-payload"`
	Examples      []json.RawMessage `json:"examples"`
	Bindings      json.RawMessage   `json:"bindings"`
}

func compileMessage(comp *jsonschema.Compiler, id string, rm rawMessage, defaultContentType string) (*Message, error) {
	if rm.Name == "" || rm.Headers == nil || rm.Payload == nil {
		return nil, fmt.Errorf("message %s: want a name, headers and a payload", id)
	}
	m := &Message{Name: rm.Name, ID: id, ContentType: rm.ContentType, LegacyPayload: rm.LegacyPayload}
	if m.ContentType == "" {
		m.ContentType = defaultContentType
	}
	base := "#/components/messages/" + id
	var err error
	if m.headers, err = comp.Compile(docURL + base + "/headers"); err != nil {
		return nil, fmt.Errorf("message %s headers: %w", id, err)
	}
	if m.payload, err = comp.Compile(docURL + base + "/payload"); err != nil {
		return nil, fmt.Errorf("message %s payload: %w", id, err)
	}
	if m.binding, err = bindingName(rm.Bindings); err != nil {
		return nil, fmt.Errorf("message %s: %w", id, err)
	}
	if m.key, err = comp.Compile(docURL + "#/components/messageBindings/" + m.binding + "/kafka/key"); err != nil {
		return nil, fmt.Errorf("message %s key: %w", id, err)
	}
	for _, raw := range rm.Examples {
		var ex struct {
			Name    string            `json:"name"`
			Headers map[string]string `json:"headers"`
			Payload json.RawMessage   `json:"payload"`
		}
		if err := json.Unmarshal(raw, &ex); err != nil {
			return nil, fmt.Errorf("message %s example: %w", id, err)
		}
		m.Examples = append(m.Examples, Example(ex))
	}
	return m, nil
}

// bindingName returns the components.messageBindings entry a message's
// bindings refer to.
func bindingName(raw json.RawMessage) (string, error) {
	var ref struct {
		Ref string `json:"$ref"`
	}
	if raw == nil || json.Unmarshal(raw, &ref) != nil {
		return "", errors.New("want bindings as a $ref to components.messageBindings")
	}
	name, ok := strings.CutPrefix(ref.Ref, "#/components/messageBindings/")
	if !ok || name == "" {
		return "", fmt.Errorf("bindings $ref %q is not in components.messageBindings", ref.Ref)
	}
	return name, nil
}

// Default loads the document pkg/events embeds.
func Default() (*Contract, error) { return Load(events.AsyncAPI()) }

// Topics lists the channels' addresses, sorted.
func (c *Contract) Topics() []string {
	out := make([]string, 0, len(c.channels))
	for t := range c.channels {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Messages lists the messages of topic, by name.
func (c *Contract) Messages(topic string) []*Message {
	out := slices.Clone(c.channels[topic])
	slices.SortFunc(out, func(a, b *Message) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Message returns the message named name.
func (c *Contract) Message(name string) (*Message, bool) {
	m, ok := c.messages[name]
	return m, ok
}

// CheckPayload validates data as the message's payload.
func (m *Message) CheckPayload(data []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s payload is not JSON: %w", m.Name, err)
	}
	if err := m.payload.Validate(v); err != nil {
		return fmt.Errorf("%s payload %s: %w", m.Name, data, detailed(err))
	}
	return nil
}

// CheckHeaders validates headers, given once each, as the message's.
func (m *Message) CheckHeaders(headers map[string]string) error {
	obj := make(map[string]any, len(headers))
	for k, v := range headers {
		obj[k] = v
	}
	if err := m.headers.Validate(obj); err != nil {
		return fmt.Errorf("%s headers %v: %w", m.Name, headers, detailed(err))
	}
	return nil
}

// Check validates a record read from its topic and returns the message it
// matched.
func (c *Contract) Check(r Record) (*Message, error) {
	msgs := c.channels[r.Topic]
	if len(msgs) == 0 {
		return nil, fmt.Errorf("topic %q is not in the contract", r.Topic)
	}
	headers := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		if _, dup := headers[h.Key]; dup {
			return nil, fmt.Errorf("%s: header %q given twice", r.Topic, h.Key)
		}
		headers[h.Key] = h.Value
	}
	m := msgs[0]
	if len(msgs) > 1 {
		i := slices.IndexFunc(msgs, func(m *Message) bool { return m.Name == headers["ce_type"] })
		if i < 0 {
			return nil, fmt.Errorf("%s: no message of the topic has ce_type %q", r.Topic, headers["ce_type"])
		}
		m = msgs[i]
	}
	var errs []error
	if err := m.CheckHeaders(headers); err != nil {
		errs = append(errs, err)
	}
	if m.ContentType == "application/json" {
		if err := m.CheckPayload(r.Value); err != nil {
			errs = append(errs, err)
		}
	}
	if h := m.keyHeader; h != "" && (r.Key == nil || string(r.Key) != headers[h]) {
		errs = append(errs, fmt.Errorf("%s: key %q is not the %s header %q", m.Name, r.Key, h, headers[h]))
	}
	if r.Key != nil {
		if err := m.key.Validate(string(r.Key)); err != nil {
			errs = append(errs, fmt.Errorf("%s key %q: %w", m.Name, r.Key, detailed(err)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%s record: %w", r.Topic, err)
	}
	return m, nil
}

// detailedError shows every failed keyword of a validation, where its
// Error names only the schema.
type detailedError struct{ *jsonschema.ValidationError }

func (e detailedError) Error() string { return fmt.Sprintf("%#v", e.ValidationError) }

func (e detailedError) Unwrap() error { return e.ValidationError }

func detailed(err error) error {
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		return detailedError{ve}
	}
	return err
}
