// Package web serves the live page: plain HTML, CSS and JavaScript embedded
// in the binary, with no build step and nothing fetched from elsewhere, so it
// works offline next to the terminal that runs the stack.
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var files embed.FS

// Index serves the page at /.
func Index(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeFileFS(w, r, assets(), "index.html")
}

// Static serves the page's assets under /static/.
func Static() http.Handler {
	return http.StripPrefix("/static/", http.FileServerFS(assets()))
}

// assets is the static folder itself, so that URLs need not repeat it.
func assets() fs.FS {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // "static" is a valid path; fs.Sub fails only on invalid ones
	}
	return sub
}
