package catalog

import (
	"context"
	"errors"
	"os"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
)

// Lister lists and searches a job's snapshots with restic, as the job's user (jobunit.Browser).
type Lister interface {
	Ls(ctx context.Context, job model.Job, snapshot, dir string, recursive bool, each func(engine.Node) error) error
	Find(ctx context.Context, job model.Job, pattern string, snapshots []string, each func(engine.Found) error) error
}

// Browser lists a snapshot from its catalog on this host when it has one, and through Restic
// otherwise; a search is restic's (its patterns are restic's to match).
type Browser struct {
	Dir    string // the catalogs: <state>/catalogs
	Restic Lister
}

// Ls lists as Lister.Ls does. A catalog that cannot be read before its first entry is removed
// (the builder makes it again) and restic asked instead.
func (b Browser) Ls(ctx context.Context, job model.Job, snapshot, dir string, recursive bool, each func(engine.Node) error) error {
	handed := false
	ok, err := Ls(b.Dir, job.Name, snapshot, dir, recursive, func(n engine.Node) error {
		handed = true
		return each(n)
	})
	switch {
	case ok && (err == nil || handed):
		return err
	case ok:
		if rmErr := os.Remove(Path(b.Dir, job.Name, snapshot)); rmErr != nil {
			return errors.Join(err, rmErr)
		}
	}
	return b.Restic.Ls(ctx, job, snapshot, dir, recursive, each)
}

// Find searches as Lister.Find does.
func (b Browser) Find(ctx context.Context, job model.Job, pattern string, snapshots []string, each func(engine.Found) error) error {
	return b.Restic.Find(ctx, job, pattern, snapshots, each)
}
