package server

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// The page at /ui/: three static files built into the binary (no CDN, no
// build step), which read the dashboard (dashboard.go) with the user's
// token. The files hold no data, so they are served to anyone; the page
// asks for a token when the dashboard answers 401, keeps it in the tab's
// sessionStorage and sends it as Authorization: Bearer, to this node and,
// when this node stops answering, to the other members (docs/ui.md).

//go:embed ui/index.html ui/app.js ui/style.css
var uiFiles embed.FS

func (a *API) uiHandler() http.Handler {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// The page may read the dashboard of its own node and of the other
		// members (to fail over), and load nothing from anywhere else.
		connect := append([]string{"'self'"}, a.memberOrigins(r.Context())...)
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
			"connect-src "+strings.Join(connect, " ")+"; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
