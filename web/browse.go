package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/textsafe"
)

// Browser looks inside a job's snapshots: restic ls and find run as the job's user in its query
// units (jobunit.Browser), their answers handed on as they come.
type Browser interface {
	Ls(ctx context.Context, job model.Job, snapshot, dir string, recursive bool, each func(engine.Node) error) error
	Find(ctx context.Context, job model.Job, pattern string, snapshots []string, each func(engine.Found) error) error
}

// What a page of a snapshot's tree or of a search shows at most: the listing is read up to
// there and restic stopped, so a directory of a million entries costs a page.
const (
	treePage   = 200
	foundShown = 1000
)

// errEnough stops a listing once a page has what it shows.
var errEnough = errors.New("the page is full")

// errNoBrowser is a page that looks inside snapshots served without a Browser.
var errNoBrowser = errors.New("this dashboard cannot look inside snapshots or restore (it was started without systemd)")

// jobSnapshots reads a job with a repository and its snapshots as the inventory knows them,
// newest first.
func (s *server) jobSnapshots(ctx context.Context, name string) (model.Job, []model.Snapshot, error) {
	j, err := s.cfg.Store.JobGet(ctx, name)
	if err != nil {
		return model.Job{}, nil, err
	}
	if !j.HasRepository() {
		return model.Job{}, nil, fmt.Errorf("job %s uses the %s engine: it has no snapshots: %w", j.Name, j.Engine, store.ErrNotFound)
	}
	all, err := s.cfg.Store.SnapshotList(ctx, j.Repository)
	if err != nil {
		return model.Job{}, nil, err
	}
	var mine []model.Snapshot
	for _, snap := range all {
		if snap.JobName == j.Name {
			mine = append(mine, snap)
		}
	}
	return j, mine, nil
}

// snapshotNamed is the snapshot of snaps that id names: a prefix of its id at least minPrefix
// long, or its whole id where the inventory knows it by the short id a backup's summary gave.
func snapshotNamed(snaps []model.Snapshot, id string, minPrefix int) (model.Snapshot, bool) {
	for _, c := range snaps {
		if len(id) >= minPrefix && strings.HasPrefix(c.ID, id) || len(c.ID) >= 8 && strings.HasPrefix(id, c.ID) {
			return c, true
		}
	}
	return model.Snapshot{}, false
}

func (s *server) snapshots(ctx context.Context, r *http.Request) (any, error) {
	j, snaps, err := s.jobSnapshots(ctx, r.PathValue("name"))
	if err != nil {
		return nil, err
	}
	return struct {
		page
		Job       model.Job
		Snapshots []model.Snapshot
	}{page{"Snapshots of " + j.Name, now()}, j, snaps}, nil
}

// crumb is a step of the way to a directory: its name and the path it leads to.
type crumb struct{ Name, Path string }

// entry is a line of a snapshot's tree or of a search: the node, its name as shown (escaped),
// and where its links lead.
type entry struct {
	engine.Node
	Name     string
	Open     string // a directory's listing
	Versions string // a file's versions across the job's snapshots
	Restore  string // the form that restores it, for an operator
}

func (s *server) entryOf(r *http.Request, job string, snapshot string, n engine.Node, name string) entry {
	e := entry{Node: n, Name: textsafe.String(name)}
	if principalOf(r).Operator && s.cfg.Restore != nil {
		e.Restore = "/jobs/" + url.PathEscape(job) + "/restore?" + url.Values{"snapshot": {snapshot}, "path": {n.Path}}.Encode()
	}
	switch n.Type {
	case "dir":
		e.Open = "/jobs/" + url.PathEscape(job) + "/snapshots/" + snapshot + "?" + url.Values{"path": {n.Path}}.Encode()
	case "file":
		e.Versions = "/jobs/" + url.PathEscape(job) + "/find?" + url.Values{"pattern": {engine.GlobEscape(n.Path)}}.Encode()
	}
	return e
}

func (s *server) tree(ctx context.Context, r *http.Request) (any, error) {
	if s.cfg.Browser == nil {
		return nil, errNoBrowser
	}
	j, snaps, err := s.jobSnapshots(ctx, r.PathValue("name"))
	if err != nil {
		return nil, err
	}
	want := r.PathValue("id")
	snap, ok := snapshotNamed(snaps, want, 4)
	if !ok {
		return nil, fmt.Errorf("snapshot %s of job %s: %w", textsafe.String(want), j.Name, store.ErrNotFound)
	}
	dir := r.URL.Query().Get("path")
	if dir == "" {
		dir = "/"
	}
	if !strings.HasPrefix(dir, "/") || strings.ContainsRune(dir, 0) {
		return nil, badRequest("the path must be absolute")
	}
	dir = path.Clean(dir)
	pageNo, err := pageParam(r)
	if err != nil {
		return nil, err
	}
	data := struct {
		page
		Job        model.Job
		Snapshot   model.Snapshot
		Dir        string
		Crumbs     []crumb
		Entries    []entry
		Page       int
		Prev, Next string
		Missing    bool
		// RestoreHere is the form that restores this directory, for an operator.
		RestoreHere string
	}{page: page{fmt.Sprintf("Snapshot %.8s of %s", snap.ID, j.Name), now()}, Job: j, Snapshot: snap, Dir: textsafe.String(dir), Page: pageNo}
	data.Crumbs = append(data.Crumbs, crumb{"/", "/"})
	if dir != "/" {
		at := ""
		for _, part := range strings.Split(strings.TrimPrefix(dir, "/"), "/") {
			at += "/" + part
			data.Crumbs = append(data.Crumbs, crumb{textsafe.String(part), at})
		}
	}
	skip, seen := (pageNo-1)*treePage, false
	more := false
	err = s.cfg.Browser.Ls(ctx, j, snap.ID, dir, false, func(n engine.Node) error {
		if n.Path == dir {
			seen = true // restic lists the directory itself first
			return nil
		}
		if skip > 0 {
			skip--
			return nil
		}
		if len(data.Entries) == treePage {
			more = true
			return errEnough
		}
		data.Entries = append(data.Entries, s.entryOf(r, j.Name, snap.ID[:min(len(snap.ID), 16)], n, path.Base(n.Path)))
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, err
	}
	data.Missing = !seen && dir != "/"
	if !data.Missing {
		data.RestoreHere = s.entryOf(r, j.Name, snap.ID[:min(len(snap.ID), 16)], engine.Node{Path: dir, Type: "dir"}, "").Restore
	}
	link := func(p int) string {
		return "?" + url.Values{"path": {dir}, "page": {strconv.Itoa(p)}}.Encode()
	}
	if pageNo > 1 {
		data.Prev = link(pageNo - 1)
	}
	if more {
		data.Next = link(pageNo + 1)
	}
	return data, nil
}

// foundGroup is a snapshot's matches in a search.
type foundGroup struct {
	Snapshot model.Snapshot
	Known    bool
	Entries  []entry
}

func (s *server) find(ctx context.Context, r *http.Request) (any, error) {
	j, snaps, err := s.jobSnapshots(ctx, r.PathValue("name"))
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	data := struct {
		page
		Job      model.Job
		Pattern  string
		Newest   string
		Groups   []foundGroup
		Found    int
		More     bool
		Searched bool
	}{page: page{"Search the snapshots of " + j.Name, now()}, Job: j, Pattern: q.Get("pattern"), Newest: q.Get("newest")}
	if data.Pattern == "" {
		return data, nil
	}
	if s.cfg.Browser == nil {
		return nil, errNoBrowser
	}
	if strings.ContainsRune(data.Pattern, 0) {
		return nil, badRequest("the pattern holds a NUL")
	}
	if _, err := path.Match(data.Pattern, ""); err != nil {
		return nil, badRequest("the pattern is not a glob")
	}
	var ids []string
	if data.Newest != "" {
		n, err := strconv.Atoi(data.Newest)
		if err != nil || n < 1 {
			return nil, badRequest("newest: give a number of snapshots, at least 1")
		}
		for _, snap := range snaps[:min(n, len(snaps))] {
			ids = append(ids, snap.ID)
		}
		if len(ids) == 0 {
			data.Searched = true
			return data, nil
		}
	}
	err = s.cfg.Browser.Find(ctx, j, data.Pattern, ids, func(f engine.Found) error {
		if data.Found == foundShown {
			data.More = true
			return errEnough
		}
		data.Found++
		if n := len(data.Groups); n == 0 || !strings.HasPrefix(f.Snapshot, data.Groups[n-1].Snapshot.ID) {
			g := foundGroup{Snapshot: model.Snapshot{ID: f.Snapshot}}
			if snap, ok := snapshotNamed(snaps, f.Snapshot, len(f.Snapshot)); ok {
				g.Snapshot, g.Known = snap, true
			}
			data.Groups = append(data.Groups, g)
		}
		g := &data.Groups[len(data.Groups)-1]
		g.Entries = append(g.Entries, s.entryOf(r, j.Name, f.Snapshot[:16], f.Node, f.Node.Path))
		return nil
	})
	if errors.Is(err, engine.ErrTooManyFound) {
		return nil, badRequest(err.Error())
	}
	if err != nil && !errors.Is(err, errEnough) {
		return nil, err
	}
	data.Searched = true
	return data, nil
}

// pageParam is a listing's page, 1 by default.
func pageParam(r *http.Request) (int, error) {
	p := r.URL.Query().Get("page")
	if p == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 1<<20 {
		return 0, badRequest("page: give a page number, from 1")
	}
	return n, nil
}

// requestError is a request the dashboard refuses as it was asked: 400.
type requestError struct{ msg string }

func (e requestError) Error() string { return e.msg }

func badRequest(msg string) error { return requestError{msg} }
