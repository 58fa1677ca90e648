// Package web is holdfast's dashboard: the jobs and their state, runs with live progress and
// their log tail, a job's retention plan with a reason per snapshot, a job's snapshots, their
// trees a directory (and a page) at a time and searches across them, the accounts and their
// ledger. It writes nothing but a restore an operator's credential asks for (a POST with the
// form's token, from the dashboard's own page), which its Restorer admits. Pages are
// html/template with embedded assets and make no request elsewhere; the daemon serves them beside
// /metrics, behind a Guard: the Host check, credentials always, and a bound on the requests
// served at once.
package web

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/forget"
	"github.com/holdfast-backup/holdfast/journallog"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/retention"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/textsafe"
	"github.com/holdfast-backup/holdfast/watch"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed assets
var assets embed.FS

// Store is what the dashboard reads, and it writes nothing: its pages' own reads, the status
// report's (watch.StatusReader) and a retention plan's (forget.Store). The daemon gives its
// store.Store.
type Store interface {
	watch.StatusReader
	forget.Store
	RunList(ctx context.Context, jobName string, limit int) ([]model.Run, error)
	RunResolve(ctx context.Context, idOrPrefix string) (uuid.UUID, error)
	RunGet(ctx context.Context, id uuid.UUID) (model.Run, error)
	AttemptList(ctx context.Context, runID uuid.UUID) ([]model.Attempt, error)
	SnapshotList(ctx context.Context, repository string) ([]model.Snapshot, error)
	EntryList(ctx context.Context, account string, limit int) ([]model.LedgerEntry, error)
}

// Config configures the dashboard.
type Config struct {
	Store Store
	// JournalDir is the journal directory run pages read their log tail from ("" the system's).
	JournalDir string
	// Host is whose snapshots a retention plan covers. Default the host name.
	Host string
	// Restic is the release of the daemon's restic, whose forget rules a retention plan follows
	// (forget.Request.Restic); zero keeps what any release would keep.
	Restic engine.ResticVersion
	// Browser looks inside the jobs' snapshots; nil leaves their trees and searches out.
	Browser Browser
	// Restore admits a restore an operator's credential asks for (on Host); nil offers none.
	Restore Restorer
	Logger  *slog.Logger
}

const (
	pageTimeout = 15 * time.Second
	logLines    = 100
	runsShown   = 100
	entries     = 100
)

// Handler serves the dashboard's pages, its assets and /api/runs/{id}.
func Handler(cfg Config) (http.Handler, error) {
	if cfg.Store == nil {
		return nil, errors.New("web: no store")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"jobs", "job", "runs", "run", "plan", "accounts", "snapshots", "tree", "find", "restore"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/runs.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("web: template %s: %w", name, err)
		}
		pages[name] = t
	}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	s := &server{cfg: cfg, pages: pages, csrfKey: make([]byte, 32)}
	if _, err := rand.Read(s.csrfKey); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", s.show("jobs", s.jobs))
	mux.HandleFunc("GET /jobs/{name}", s.show("job", s.job))
	mux.HandleFunc("GET /jobs/{name}/plan", s.show("plan", s.plan))
	mux.HandleFunc("GET /jobs/{name}/snapshots", s.show("snapshots", s.snapshots))
	mux.HandleFunc("GET /jobs/{name}/snapshots/{id}", s.show("tree", s.tree))
	mux.HandleFunc("GET /jobs/{name}/find", s.show("find", s.find))
	mux.HandleFunc("GET /jobs/{name}/restore", s.show("restore", s.restoreGet))
	mux.HandleFunc("POST /jobs/{name}/restore", s.restorePost)
	mux.HandleFunc("GET /runs", s.show("runs", s.runs))
	mux.HandleFunc("GET /runs/{id}", s.show("run", s.run))
	mux.HandleFunc("GET /api/runs/{id}", s.apiRun)
	mux.HandleFunc("GET /accounts", s.show("accounts", s.accounts))
	mux.HandleFunc("GET /accounts/{name}", s.show("accounts", s.accounts))
	return mux, nil
}

var funcs = template.FuncMap{
	"age":     func(t *time.Time) string { return watch.Age(t, time.Now()) },
	"checked": func(t *time.Time, last string) string { return watch.Checked(t, last, time.Now()) },
	"when": func(t any, none string) string {
		switch v := t.(type) {
		case time.Time:
			return v.UTC().Format("2006-01-02 15:04:05Z")
		case *time.Time:
			if v != nil {
				return v.UTC().Format("2006-01-02 15:04:05Z")
			}
		}
		return none
	},
	"short": func(id any) string {
		switch v := id.(type) {
		case uuid.UUID:
			return v.String()[:8]
		case *uuid.UUID:
			if v != nil {
				return v.String()[:8]
			}
		}
		return ""
	},
	"percent": func(p float64) string { return fmt.Sprintf("%.1f%%", p*100) },
	"size":    ledger.FormatSize,
	// safe escapes the repository's and the hosts' text: control characters and newlines.
	"safe": textsafe.String,
	"deref": func(n *int64) int64 {
		if n == nil {
			return 0
		}
		return *n
	},
	"filesize": func(n *uint64) int64 {
		if n == nil {
			return 0
		}
		return int64(min(*n, 1<<62))
	},
}

type server struct {
	cfg     Config
	pages   map[string]*template.Template
	csrfKey []byte // made at each start: the restore forms' tokens (csrfToken)
}

// page is what every template gets, plus its own fields.
type page struct {
	Title string
	At    string
}

func (s *server) render(w http.ResponseWriter, name string, data any) {
	s.renderStatus(w, name, data, http.StatusOK)
}

func (s *server) renderStatus(w http.ResponseWriter, name string, data any, status int) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", contentSecurityPolicy)
	w.WriteHeader(status)
	if err := s.pages[name].ExecuteTemplate(w, name+".html", data); err != nil {
		s.cfg.Logger.Warn("dashboard page failed", "page", name, "err", err)
	}
}

func (s *server) fail(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAmbiguous) {
		status = http.StatusNotFound
	}
	if errors.Is(err, journallog.ErrBusy) {
		status = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "5")
	}
	if errors.Is(err, errNoBrowser) {
		status = http.StatusServiceUnavailable
	}
	if errors.Is(err, errNotOperator) {
		status = http.StatusForbidden
	}
	var bad requestError
	if errors.As(err, &bad) {
		status = http.StatusBadRequest
	}
	http.Error(w, textsafe.String(err.Error()), status)
}

func now() string { return time.Now().UTC().Format("2006-01-02 15:04:05Z") }

// show serves the page name: load reads what it shows within pageTimeout, and an error it
// returns is the response instead.
func (s *server) show(name string, load func(ctx context.Context, r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
		defer cancel()
		data, err := load(ctx, r)
		if err != nil {
			s.fail(w, err)
			return
		}
		s.render(w, name, data)
	}
}

func (s *server) jobs(ctx context.Context, _ *http.Request) (any, error) {
	report, err := watch.Status(ctx, s.cfg.Store)
	if err != nil {
		return nil, err
	}
	return struct {
		page
		Report watch.Report
	}{page{"Jobs", now()}, report}, nil
}

func (s *server) job(ctx context.Context, r *http.Request) (any, error) {
	j, err := s.cfg.Store.JobGet(ctx, r.PathValue("name"))
	if err != nil {
		return nil, err
	}
	runs, err := s.cfg.Store.RunList(ctx, j.Name, runsShown)
	if err != nil {
		return nil, err
	}
	return struct {
		page
		Job  model.Job
		Runs []model.Run
	}{page{"Job " + j.Name, now()}, j, runs}, nil
}

func (s *server) runs(ctx context.Context, r *http.Request) (any, error) {
	runs, err := s.cfg.Store.RunList(ctx, r.URL.Query().Get("job"), runsShown)
	if err != nil {
		return nil, err
	}
	return struct {
		page
		Runs []model.Run
	}{page{"Runs", now()}, runs}, nil
}

func (s *server) runByPath(ctx context.Context, r *http.Request) (model.Run, []model.Attempt, error) {
	id, err := s.cfg.Store.RunResolve(ctx, r.PathValue("id"))
	if err != nil {
		return model.Run{}, nil, err
	}
	run, err := s.cfg.Store.RunGet(ctx, id)
	if err != nil {
		return model.Run{}, nil, err
	}
	attempts, err := s.cfg.Store.AttemptList(ctx, id)
	return run, attempts, err
}

func (s *server) run(ctx context.Context, r *http.Request) (any, error) {
	run, attempts, err := s.runByPath(ctx, r)
	if err != nil {
		return nil, err
	}
	// Trusted sources only, bounded; ErrBusy (503) when too many tails are being read at once.
	// Any other error is noted at the end of what could be read.
	tail, err := journallog.RunTail(ctx, s.cfg.JournalDir, run.ID, model.UnitNames(attempts), logLines)
	if errors.Is(err, journallog.ErrBusy) {
		return nil, err
	}
	return struct {
		page
		Run      model.Run
		Attempts []model.Attempt
		Log      string
	}{page{"Run " + run.ID.String(), now()}, run, attempts, tail}, nil
}

type apiProgress struct {
	PercentDone float64 `json:"percent_done"`
	FilesDone   int64   `json:"files_done"`
	TotalFiles  int64   `json:"total_files"`
	BytesDone   int64   `json:"bytes_done"`
	TotalBytes  int64   `json:"total_bytes"`
}

func (s *server) apiRun(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	run, attempts, err := s.runByPath(ctx, r)
	if err != nil {
		s.fail(w, err)
		return
	}
	out := struct {
		ID         string       `json:"id"`
		Status     string       `json:"status"`
		Reason     string       `json:"reason"`
		Live       bool         `json:"live"`
		Attempts   int          `json:"attempts"`
		Progress   *apiProgress `json:"progress"`
		ETASeconds *float64     `json:"eta_seconds"`
	}{ID: run.ID.String(), Status: run.Status, Reason: run.Reason, Live: model.Live(run.Status), Attempts: len(attempts)}
	if n := len(attempts); n > 0 {
		a := attempts[n-1]
		if p := a.Progress; p != nil {
			out.Progress = &apiProgress{p.PercentDone, p.FilesDone, p.TotalFiles, p.BytesDone, p.TotalBytes}
			if out.Live && p.PercentDone > 0 && p.PercentDone < 1 && a.StartedAt != nil {
				eta := time.Since(*a.StartedAt).Seconds() * (1 - p.PercentDone) / p.PercentDone
				out.ETASeconds = &eta
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(out)
}

func (s *server) plan(ctx context.Context, r *http.Request) (any, error) {
	name := r.PathValue("name")
	data := struct {
		page
		Job       string
		Plan      retention.Plan
		Refusal   string
		PlanError string
	}{page: page{"Retention plan of " + name, now()}, Job: name}
	pl, err := forget.Plan(ctx, s.cfg.Store, forget.Request{Job: name, At: time.Now(), Host: s.cfg.Host, Restic: s.cfg.Restic,
		Read: func(ctx context.Context, j model.Job) ([]model.Snapshot, error) {
			return s.cfg.Store.SnapshotList(ctx, j.Repository)
		}})
	var conflict *store.ConflictError
	switch {
	case errors.As(err, &conflict):
		data.PlanError = conflict.Error()
	case err != nil:
		return nil, err
	default:
		data.Plan = pl.Plan
		if pl.Refusal != nil {
			data.Refusal = pl.Refusal.Error()
		}
	}
	return data, nil
}

func (s *server) accounts(ctx context.Context, r *http.Request) (any, error) {
	name := r.PathValue("name")
	accounts, err := s.cfg.Store.AccountList(ctx, name)
	if err != nil {
		return nil, err
	}
	if name != "" && len(accounts) == 0 {
		return nil, fmt.Errorf("account %s: %w", name, store.ErrNotFound)
	}
	var list []model.LedgerEntry
	if name != "" {
		if list, err = s.cfg.Store.EntryList(ctx, name, entries); err != nil {
			return nil, err
		}
	}
	title := "Accounts"
	if name != "" {
		title = "Account " + name
	}
	return struct {
		page
		Accounts []model.Account
		Entries  []model.LedgerEntry
	}{page{title, now()}, accounts, list}, nil
}
