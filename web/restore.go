package web

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/runctl"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/textsafe"
)

// Restorer admits a restore as `holdfast restore` does (runctl.Restore, with the daemon's
// store, query units and probe): the same checks, the same run.
type Restorer func(ctx context.Context, p runctl.RestoreParams) (runctl.Restored, error)

// restoreTimeout bounds a restore's checks: the snapshot and its size asked of the repository
// in query units, the target probed as the job's user.
const restoreTimeout = 2 * time.Minute

// errNotOperator refuses a restore to a credential that reads only.
var errNotOperator = errors.New("this credential reads only: restoring needs an operator's (a line of the auth file with \"operator\" after its secret)")

// csrfToken is what a restore's form carries: bound to the credential that got the form and to
// this daemon's run (its key is made at each start), so a page of another site, which cannot
// read the form, cannot make a request that passes.
func (s *server) csrfToken(p Principal) string {
	mac := hmac.New(sha256.New, s.csrfKey)
	mac.Write(p.binding[:])
	return hex.EncodeToString(mac.Sum(nil))
}

// sameOrigin reports whether a state-changing request comes from the dashboard's own pages, as
// the browser says: its Origin, and its Sec-Fetch-Site. The dashboard's Referrer-Policy
// (no-referrer) has a browser send "Origin: null" with a form's POST, which only Sec-Fetch-Site
// then vouches for. A client that sends neither (not a browser) is held to the form's token alone.
func sameOrigin(r *http.Request) bool {
	origin, site := r.Header.Get("Origin"), r.Header.Get("Sec-Fetch-Site")
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	switch {
	case origin == "null":
		return site == "same-origin"
	case origin != "" && origin != scheme+"://"+r.Host:
		return false
	}
	return site == "" || site == "same-origin"
}

// restorePage is the form of a restore of one path of a snapshot, and why the last try was refused.
type restorePage struct {
	page
	Job       model.Job
	Snapshot  model.Snapshot
	Path      string // as asked, for the form
	Shown     string // escaped, to be shown
	Include   string // the include restic is given, escaped to be shown
	Target    string
	Overwrite bool
	// ToOriginal puts the path back where it was instead of into Target (not for the whole
	// snapshot, whose top is no path of its own).
	ToOriginal bool
	CSRF       string
	Refusal    string
}

// restoreForm reads the job, the snapshot and the path a restore form is about.
func (s *server) restoreForm(ctx context.Context, r *http.Request, values url.Values) (restorePage, error) {
	j, snaps, err := s.jobSnapshots(ctx, r.PathValue("name"))
	if err != nil {
		return restorePage{}, err
	}
	snap, ok := snapshotNamed(snaps, values.Get("snapshot"), 8)
	if !ok {
		return restorePage{}, badRequest("snapshot: give one of the job's snapshots")
	}
	p := values.Get("path")
	if p == "" {
		p = "/"
	}
	if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\x00\n") {
		return restorePage{}, badRequest("path: give an absolute path in the snapshot")
	}
	p = path.Clean(p)
	return restorePage{page: page{"Restore from snapshot " + snap.ID[:8] + " of " + j.Name, now()}, Job: j, Snapshot: snap,
		Path: p, Shown: textsafe.String(p), Include: textsafe.String(engine.GlobEscape(p)), CSRF: s.csrfToken(principalOf(r))}, nil
}

func (s *server) restoreGet(ctx context.Context, r *http.Request) (any, error) {
	if !principalOf(r).Operator {
		return nil, errNotOperator
	}
	if s.cfg.Restore == nil {
		return nil, errNoBrowser
	}
	return s.restoreForm(ctx, r, r.URL.Query())
}

// restorePost carries out a restore's form: an operator's credential, a request from the
// dashboard's own page with the form's token, then runctl.Restore; the run's page follows it.
func (s *server) restorePost(w http.ResponseWriter, r *http.Request) {
	who := principalOf(r)
	switch {
	case !who.Operator:
		http.Error(w, errNotOperator.Error(), http.StatusForbidden)
		return
	case !sameOrigin(r):
		http.Error(w, "refused: the request did not come from the dashboard's own page", http.StatusForbidden)
		return
	case s.cfg.Restore == nil:
		s.fail(w, errNoBrowser)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "the form could not be read", http.StatusBadRequest)
		return
	}
	if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(s.csrfToken(who))) {
		http.Error(w, "refused: the form's token is missing or not this credential's (reload the form)", http.StatusForbidden)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), restoreTimeout)
	defer cancel()
	form, err := s.restoreForm(ctx, r, r.PostForm)
	if err != nil {
		s.fail(w, err)
		return
	}
	form.Target, form.Overwrite = strings.TrimSpace(r.PostForm.Get("target")), r.PostForm.Get("overwrite") == "on"
	form.ToOriginal = r.PostForm.Get("where") == "original" && form.Path != "/"
	p := runctl.RestoreParams{Job: form.Job.Name, Snapshot: form.Snapshot.ID, Target: form.Target, Overwrite: form.Overwrite,
		Host: s.cfg.Host, RequestedBy: who.Label}
	switch {
	case form.ToOriginal:
		// Back where it was: the path itself, which the restore escapes for restic.
		p.Target, p.ToOriginal, p.Includes = "", true, []string{form.Path}
	case form.Path != "/":
		// restic reads an include as a pattern: the path's glob characters are escaped.
		p.Includes = []string{engine.GlobEscape(form.Path)}
	}
	restored, err := s.cfg.Restore(ctx, p)
	for _, warning := range restored.Warnings {
		s.cfg.Logger.Warn("dashboard restore", "job", p.Job, "target", p.Target, "warning", warning)
	}
	var unavailable *runctl.UnavailableError
	switch {
	case err == nil:
		s.cfg.Logger.Info("restore asked for from the dashboard", "run", restored.Run.ID, "job", p.Job, "by", who.Label, "target", p.Target,
			"to_original", p.ToOriginal)
		http.Redirect(w, r, "/runs/"+restored.Run.ID.String(), http.StatusSeeOther)
	case runctl.Input(err) || errors.As(err, &unavailable) || errors.Is(err, store.ErrNotFound):
		form.Refusal = textsafe.String(err.Error())
		s.renderStatus(w, "restore", form, http.StatusUnprocessableEntity)
	default:
		s.fail(w, err)
	}
}
