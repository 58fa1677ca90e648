// Package ledger decides the figures of holdfast's storage accounting: how much a run may add to
// its repository (its budget), what each attempt holds of it or why the run pauses instead
// (DecideHold), and what an attempt is charged when it ends. It is pure: package store reads the
// facts and writes its answers as ledger entries in the same transactions that admit, restart and
// finish runs, so an entry and the lifecycle change it belongs to are never apart.
//
// Absent is not zero: an attempt whose added bytes cannot be known is never settled at 0, nor
// silently at its whole hold. Its hold stays open with the reason (a deferral), until a figure
// turns up or an operator settles it by hand.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/holdfast-backup/holdfast/setting"
	"golang.org/x/sys/unix"
)

// Budget estimates, when a job sets no ceiling of its own.
const (
	// DefaultEstimate is the budget of a run of a job with no ceiling and no history.
	DefaultEstimate = 1 << 30
	// MinEstimate is the smallest budget estimated from history: a run that added nothing
	// last time still writes some metadata.
	MinEstimate = 16 << 20
)

// ParseSize reads a size as operators write it: "10MiB", "5GiB", "100MB", "1048576".
func ParseSize(s string) (int64, error) {
	n, err := humanize.ParseBytes(strings.TrimSpace(s))
	if err != nil || n == 0 || n > 1<<62 {
		return 0, fmt.Errorf("size %q: give a positive size like 10MiB, 5GiB or 1048576", s)
	}
	return int64(n), nil
}

// Budget is what a run of a job may add over all its attempts: the job's ceiling if it has one,
// else twice the most its recent runs added (at least MinEstimate), else what the job's paths
// hold with room for restic's metadata (source, measured as its first attempt starts), else
// DefaultEstimate. why says which, for the run's record.
func Budget(maxAdded *int64, recentAdded []int64, source *Source) (bytes int64, why string) {
	if maxAdded != nil {
		return *maxAdded, setting.Render("the job's ceiling ({Job.MaxAdded})")
	}
	if len(recentAdded) == 0 && source != nil {
		return sourceBudget(*source)
	}
	if len(recentAdded) == 0 {
		return DefaultEstimate, "no ceiling and no history: the default estimate"
	}
	most := int64(0)
	for _, b := range recentAdded {
		most = max(most, b)
	}
	return max(2*most, MinEstimate), fmt.Sprintf("no ceiling: twice the most the last %d run(s) added", len(recentAdded))
}

// Evidence is what is known about what an ended attempt added. The run's own figures are claims:
// the journal that carries them is written by the job's user. What holdfast measured itself is
// not.
type Evidence struct {
	Spawned bool // its unit was started; an attempt that never ran added nothing
	// DataAdded is the engine's own figure (restic's summary data_added, relayed by the run's
	// journal); nil if it printed none.
	DataAdded *int64
	// Growth is the measured growth of a local repository over the attempt; nil if it is not
	// known, with NoGrowth saying why.
	Growth   *int64
	NoGrowth string
	// UpperBound, when set, says why Growth is only an upper bound: another run wrote to the
	// same repository meanwhile.
	UpperBound string
	// SnapshotAdded is what the run's snapshot refers to that the repository's earlier snapshots
	// do not (restic stats --mode raw-data, asked afterwards); nil if not asked or no snapshot.
	SnapshotAdded *int64
}

// Settlement is what an ended attempt's hold becomes.
type Settlement struct {
	Release  bool   // the hold comes back whole: the attempt never ran
	Bytes    int64  // charged, at most the hold
	Source   string // where Bytes comes from
	Deferred string // non-empty: the hold stays open, and this is why
}

// Settle decides an ended attempt's charge against its hold. A measured growth of the attempt's
// own is a floor: with the run's reported figure too, the higher of the two is charged, so a
// forged journal cannot charge less than the repository grew. Without a growth of its own, the
// run's figure is charged as reported, and the source says it was not verified; then a growth
// shared with another run, as an upper bound; then restic's account of what the run's snapshot
// added; else the hold stays open. A charge is never below the run's own claim. The journal's
// progress is no figure: it counts bytes read, unchanged files included. A figure above the hold
// is charged at the hold, and the source says so: nothing is ever charged beyond what was held.
func Settle(hold int64, ev Evidence) Settlement {
	charge := func(figure int64, source string) Settlement {
		if figure > hold {
			return Settlement{Bytes: hold, Source: fmt.Sprintf("%s: %s, more than the hold; charged at the hold",
				source, FormatSize(figure))}
		}
		return Settlement{Bytes: max(figure, 0), Source: source}
	}
	const claim = "restic's summary (data_added), reported by the run"
	switch {
	case !ev.Spawned:
		return Settlement{Release: true, Source: "the attempt never ran"}
	case ev.Growth != nil && ev.UpperBound == "" && ev.DataAdded != nil:
		grown, claimed := max(*ev.Growth, 0), max(*ev.DataAdded, 0)
		if grown > claimed {
			return charge(grown, fmt.Sprintf("measured growth of the local repository; the run reported less (data_added %s)",
				FormatSize(claimed)))
		}
		than := "lower"
		if grown == claimed {
			than = "the same"
		}
		return charge(claimed, fmt.Sprintf("%s; the measured growth of the local repository (%s) is %s", claim, FormatSize(grown), than))
	case ev.Growth != nil && ev.UpperBound == "":
		return charge(*ev.Growth, "measured growth of the local repository")
	case ev.DataAdded != nil:
		why := ev.NoGrowth
		if ev.UpperBound != "" {
			why = ev.UpperBound
		}
		if why == "" {
			why = "nothing measured the repository"
		}
		return charge(*ev.DataAdded, claim+", not verified: "+why)
	case ev.Growth != nil:
		return charge(*ev.Growth, "measured growth of the local repository, an upper bound: "+ev.UpperBound)
	case ev.SnapshotAdded != nil:
		return charge(*ev.SnapshotAdded, "restic stats: the data its snapshot refers to that no earlier snapshot does")
	}
	why := ev.NoGrowth
	if why == "" {
		why = "nothing measured the repository"
	}
	return Settlement{Deferred: "restic reported no data_added (it printed no summary), and " + why +
		": settle by hand with holdfast ledger settle"}
}

// Local returns the directory of a local restic repository ("/srv/repo" or "local:/srv/repo");
// ok is false for any other backend.
func Local(repository string) (dir string, ok bool) {
	dir = strings.TrimPrefix(repository, "local:")
	return dir, filepath.IsAbs(dir)
}

// ErrNotLocal means a repository is not a local directory, so it cannot be measured.
var ErrNotLocal = errors.New("the repository is not a local directory")

// RepoSize is the size of a local repository: the sum of the sizes of the regular files under
// it. The repository belongs to the job's user and root measures it, so no symbolic link is ever
// followed, the repository itself included (that is an error): a link to elsewhere counts
// nothing and what it points to is never read. Directories are opened relative to their parent,
// so a directory swapped for a link while it walks is skipped too. Files that vanish while it
// walks (restic removes temporary files) are skipped.
func RepoSize(repository string) (int64, error) {
	dir, ok := Local(repository)
	if !ok {
		return 0, ErrNotLocal
	}
	fd, err := OpenDir(-1, dir)
	if err != nil {
		return 0, fmt.Errorf("measure repository %s: %w", dir, err)
	}
	w := newWalker(context.Background())
	w.walk(fd, ".", maxDepth)
	bytes, _, err := w.wait()
	if err != nil {
		return 0, fmt.Errorf("measure repository %s: %w", dir, err)
	}
	return bytes, nil
}

// maxDepth bounds how deep RepoSize descends. restic's files lie at most two directories down
// (data/ab/<pack>); a deeper tree is not restic's, and following it would only let the job's user
// spend the daemon's file descriptors.
const maxDepth = 8

// OpenDir opens the directory name (relative to dirfd, or absolute with dirfd -1) for reading,
// refusing a symbolic link as its last component. The caller closes the descriptor.
func OpenDir(dirfd int, name string) (int, error) {
	if dirfd < 0 {
		dirfd = unix.AT_FDCWD
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		var st unix.Stat_t
		if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return -1, fmt.Errorf("%s is a symbolic link, which holdfast does not follow", name)
		}
	}
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return fd, nil
}

// FormatSize writes a size for people: "10 MiB".
func FormatSize(n int64) string {
	if n < 0 {
		return "-" + humanize.IBytes(uint64(-n))
	}
	return humanize.IBytes(uint64(n))
}
