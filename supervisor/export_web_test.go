package supervisor

import (
	"log/slog"
	"net/http"
)

// NewHTTPServer is the web server the daemon serves its listener with.
func NewHTTPServer(h http.Handler) *http.Server { return newHTTPServer(h, nil, slog.Default()) }
