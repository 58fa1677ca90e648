package retention

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-backup/holdfast/engine"
)

// Snapshot is one snapshot as the policy sees it.
type Snapshot struct {
	ID             string // full restic id
	Time           time.Time
	Host           string
	Tags           []string
	Paths          []string
	Bytes          int64 // estimate of what deleting it reclaims (0 = unknown)
	LegalHold      bool
	ImmutableUntil *time.Time
	// DependedOn says another snapshot needs this one. It is never true for
	// restic, whose snapshots are independent; it is there for engines with
	// incremental chains.
	DependedOn bool
}

// Scope selects the snapshots a plan may delete. Snapshots outside it are
// listed, but always kept.
type Scope struct {
	Job  string   // only snapshots tagged "holdfast-job=<Job>" ("" = no tag required)
	Host string   // only snapshots made on this host ("" = any host)
	Tags []string // only snapshots carrying all of these tags
}

// WithinFrom says where Policy.KeepWithin is measured from.
type WithinFrom int

const (
	// WithinFromNow measures back from Options.At.
	WithinFromNow WithinFrom = iota
	// WithinFromLatest measures back from the newest in-scope snapshot that is
	// not after Options.At, as restic does. If every snapshot is after At,
	// keep-within keeps them all.
	WithinFromLatest
)

// Options are the circumstances of a plan.
type Options struct {
	At         time.Time // the plan's reference time (zero = time.Now())
	WithinFrom WithinFrom
	Scope      Scope
	// KeepOldestOfUnfilledRule keeps the oldest snapshot in scope for each calendar rule
	// (hourly … yearly) that has fewer buckets than it would keep, as restic forget does from
	// 0.16 (engine.ResticTraits); restic 0.14 and 0.15 do not.
	KeepOldestOfUnfilledRule bool
}

// Decision is what a plan does with one snapshot, and why.
type Decision struct {
	SnapshotID   string    `json:"snapshot_id"`
	Time         time.Time `json:"time"`
	Keep         bool      `json:"keep"`
	Reason       string    `json:"reason"`
	Protected    bool      `json:"protected"` // kept only because of a legal hold or immutability
	OutsideScope bool      `json:"outside_scope,omitempty"`
	Bytes        int64     `json:"bytes,omitempty"`
}

// Plan is the outcome of applying a policy to a list of snapshots.
type Plan struct {
	Summary          string     `json:"summary"`
	At               time.Time  `json:"at"`        // the reference time the plan was made for
	Kept             int        `json:"kept"`      // in-scope snapshots kept, protected ones included
	Deletable        int        `json:"deletable"` // in-scope snapshots the plan deletes
	Protected        int        `json:"protected"` // snapshots the rules would delete but a protection keeps
	OutsideScope     int        `json:"outside_scope"`
	ReclaimableBytes int64      `json:"reclaimable_bytes"` // sum of the known Bytes of deletable snapshots
	Decisions        []Decision `json:"decisions"`         // newest first; equal times ordered by ID
}

// DeleteIDs returns the ids of the snapshots the plan deletes, newest first.
func (p Plan) DeleteIDs() []string {
	ids := make([]string, 0, p.Deletable)
	for _, d := range p.Decisions {
		if !d.Keep {
			ids = append(ids, d.SnapshotID)
		}
	}
	return ids
}

// Reasons that do not vary.
const (
	reasonNewest     = "newest snapshot of the job: always kept"
	reasonNewestAny  = "newest snapshot in scope: always kept"
	reasonDependedOn = "another snapshot depends on it"
	reasonLegalHold  = "would be deleted, but under legal hold"
	reasonDelete     = "no rule keeps it"
)

// New applies p to snaps and returns the plan. It refuses an invalid policy,
// and a list in which an id is empty or appears twice, since a plan for such
// a list could delete by id a snapshot it meant to keep.
func New(p Policy, snaps []Snapshot, opt Options) (Plan, error) {
	loc, err := p.check()
	if err != nil {
		return Plan{}, err
	}
	at := opt.At
	if at.IsZero() {
		at = time.Now()
	}
	if err := checkIDs(snaps); err != nil {
		return Plan{}, err
	}

	// Sort small keys rather than the snapshots: sorting is most of the work
	// for long lists, and the keys stay in cache.
	order := make([]sortKey, len(snaps))
	for i := range snaps {
		t := snaps[i].Time
		order[i] = sortKey{sec: t.Unix(), nsec: int32(t.Nanosecond()), idx: i}
	}
	slices.SortFunc(order, func(a, b sortKey) int {
		switch {
		case a.sec != b.sec:
			return cmp.Compare(b.sec, a.sec)
		case a.nsec != b.nsec:
			return cmp.Compare(b.nsec, a.nsec)
		}
		return strings.Compare(snaps[a.idx].ID, snaps[b.idx].ID)
	})

	plan := Plan{At: at, Decisions: make([]Decision, len(order))}
	sc := newScope(opt.Scope)
	inScope := make([]int, 0, len(order)) // positions in plan.Decisions
	for pos, o := range order {
		s := &snaps[o.idx]
		d := &plan.Decisions[pos]
		d.SnapshotID, d.Time, d.Bytes = s.ID, s.Time, s.Bytes
		if why := sc.outside(s); why != "" {
			d.Keep, d.OutsideScope, d.Reason = true, true, why
			plan.OutsideScope++
			continue
		}
		inScope = append(inScope, pos)
	}

	r := newRules(p, loc)
	r.keepOldest = opt.KeepOldestOfUnfilledRule
	if !p.KeepWithin.IsZero() {
		ref, measurable := at, true
		if opt.WithinFrom == WithinFromLatest {
			measurable = false
			for _, pos := range inScope {
				if t := plan.Decisions[pos].Time; !t.After(at) {
					ref, measurable = t, true
					break
				}
			}
		}
		r.setWithin(p.KeepWithin, ref, measurable, opt.WithinFrom)
	}

	newest := reasonNewestAny
	if opt.Scope.Job != "" {
		newest = reasonNewest
	}
	unknownBytes := false
	for k, pos := range inScope {
		d := &plan.Decisions[pos]
		s := &snaps[order[pos].idx]
		if why := r.keep(k, d.Time, k == len(inScope)-1); why != "" {
			d.Keep, d.Reason = true, why
			plan.Kept++
			continue
		}
		switch {
		case k == 0:
			d.Keep, d.Reason = true, newest
		case s.DependedOn:
			d.Keep, d.Reason = true, reasonDependedOn
		case s.LegalHold:
			d.Keep, d.Protected, d.Reason = true, true, reasonLegalHold
		case s.ImmutableUntil != nil && s.ImmutableUntil.After(at):
			d.Keep, d.Protected = true, true
			d.Reason = "would be deleted, but immutable until " + s.ImmutableUntil.Format(time.RFC3339)
		default:
			d.Reason = reasonDelete
			plan.Deletable++
			if s.Bytes > 0 {
				plan.ReclaimableBytes = addSat(plan.ReclaimableBytes, s.Bytes)
			} else {
				unknownBytes = true
			}
			continue
		}
		plan.Kept++
		if d.Protected {
			plan.Protected++
		}
	}
	plan.Summary = summary(plan, opt.Scope.Job, unknownBytes)
	return plan, nil
}

type sortKey struct {
	sec  int64
	nsec int32
	idx  int
}

// checkIDs refuses empty and repeated ids. It compares hashes first, which
// is much faster than a map for long lists, and looks closer only when two
// hashes are equal.
func checkIDs(snaps []Snapshot) error {
	seed := maphash.MakeSeed()
	hashes := make([]uint64, len(snaps))
	for i := range snaps {
		if snaps[i].ID == "" {
			return fmt.Errorf("snapshot from %s has no id: every snapshot needs its engine's id", snaps[i].Time.Format(time.RFC3339))
		}
		hashes[i] = maphash.String(seed, snaps[i].ID)
	}
	slices.Sort(hashes)
	for i := 1; i < len(hashes); i++ {
		if hashes[i] != hashes[i-1] {
			continue
		}
		seen := make(map[string]struct{}, len(snaps))
		for _, s := range snaps {
			if _, dup := seen[s.ID]; dup {
				return fmt.Errorf("snapshot id %q appears twice: list each snapshot once", s.ID)
			}
			seen[s.ID] = struct{}{}
		}
		break // a hash collision
	}
	return nil
}

func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// scope tests snapshots against a Scope.
type scope struct {
	Scope
	jobTag string
}

func newScope(s Scope) scope {
	sc := scope{Scope: s}
	if s.Job != "" {
		sc.jobTag = engine.JobTag(s.Job)
	}
	return sc
}

// outside returns why s is outside the scope, or "".
func (sc scope) outside(s *Snapshot) string {
	if sc.jobTag != "" && !slices.Contains(s.Tags, sc.jobTag) {
		return "outside scope: not tagged " + sc.jobTag
	}
	if sc.Host != "" && s.Host != sc.Host {
		return fmt.Sprintf("outside scope: made on host %q, not %q", s.Host, sc.Host)
	}
	for _, t := range sc.Tags {
		if !slices.Contains(s.Tags, t) {
			return "outside scope: lacks tag " + t
		}
	}
	return ""
}

// bucket is one calendar rule: keep the newest snapshot of each of n
// buckets. Like restic, a snapshot is kept when its bucket differs from that
// of the last snapshot this rule kept; walking newest first, that is the
// newest snapshot of each bucket.
type bucket struct {
	name string // "day", "ISO week", …
	rule string // "daily", "weekly", …
	n    int    // how many buckets to keep
	used int    // how many are kept so far
	last int64  // key of the last kept bucket
}

// rules evaluates a policy's keep rules over in-scope snapshots, newest first.
type rules struct {
	loc      *time.Location
	last     int
	within   bool
	all      bool      // keep-within keeps everything
	cutoff   time.Time // keep-within keeps what is after this
	withinBy string    // reason for keep-within
	buckets  [5]bucket // hour, day, ISO week, month, year
	active   bool      // some bucket has counts left
	// keepOldest: a bucket rule with counts left keeps the oldest snapshot too (Options).
	keepOldest bool
}

func newRules(p Policy, loc *time.Location) *rules {
	return &rules{
		loc:  loc,
		last: p.KeepLast,
		buckets: [5]bucket{
			{name: "hour", rule: "hourly", n: p.KeepHourly},
			{name: "day", rule: "daily", n: p.KeepDaily},
			{name: "ISO week", rule: "weekly", n: p.KeepWeekly},
			{name: "month", rule: "monthly", n: p.KeepMonthly},
			{name: "year", rule: "yearly", n: p.KeepYearly},
		},
		active: p.KeepHourly > 0 || p.KeepDaily > 0 || p.KeepWeekly > 0 || p.KeepMonthly > 0 || p.KeepYearly > 0,
	}
}

func (r *rules) setWithin(d Duration, ref time.Time, measurable bool, from WithinFrom) {
	r.within = true
	if !measurable {
		// Every snapshot is after the reference time: nothing is old enough to
		// lose. restic 0.14 keeps them all in this case too.
		r.all = true
		r.withinBy = "within " + FormatDuration(d) + ": every snapshot is newer than the plan time, so none is too old"
		return
	}
	r.cutoff = d.Before(ref)
	what := "the plan time "
	if from == WithinFromLatest {
		what = "the newest snapshot "
	}
	r.withinBy = "within " + FormatDuration(d) + " of " + what + ref.In(r.loc).Format(time.RFC3339)
}

// keep applies the rules to the k-th newest in-scope snapshot, oldest if it is the last, and
// returns the first reason to keep it, or "". Every bucket rule sees every snapshot, as
// in restic, so a snapshot kept by one rule still uses up another's count.
func (r *rules) keep(k int, t time.Time, oldest bool) string {
	var why string
	var also []string
	add := func(reason, name string) {
		if why == "" {
			why = reason
		} else {
			also = append(also, name)
		}
	}
	if k < r.last {
		add("one of the last "+strconv.Itoa(r.last)+" ("+strconv.Itoa(k+1)+"/"+strconv.Itoa(r.last)+")", "last")
	}
	if r.within && (r.all || t.After(r.cutoff)) {
		add(r.withinBy, "within")
	}
	if r.active {
		r.active = false
		lt := t.In(r.loc)
		year, month, dayOf := lt.Date()
		y, m, dd := int64(year), int64(month), int64(dayOf)
		for i := range r.buckets {
			b := &r.buckets[i]
			if b.used >= b.n {
				continue
			}
			var key int64
			switch i {
			case 0:
				key = ((y*100+m)*100+dd)*100 + int64(lt.Hour())
			case 1:
				key = (y*100+m)*100 + dd
			case 2:
				iy, iw := lt.ISOWeek()
				key = int64(iy)*100 + int64(iw)
			case 3:
				key = y*100 + m
			case 4:
				key = y
			}
			newBucket := b.used == 0 || key != b.last
			if newBucket || r.keepOldest && oldest {
				b.used++
				b.last = key
				reason := b.reason(lt)
				if !newBucket {
					reason = b.oldestReason()
				}
				if why == "" {
					why = reason
				} else {
					also = append(also, b.rule)
				}
			}
			r.active = r.active || b.used < b.n
		}
	}
	if len(also) > 0 {
		why += "; also " + strings.Join(also, ", ")
	}
	return why
}

// reason says why the rule kept the snapshot taken at lt (in the policy's
// zone), e.g. "newest of its day 2026-11-28 (3/30)".
func (b *bucket) reason(lt time.Time) string {
	buf := make([]byte, 0, 64)
	buf = append(buf, "newest of its "...)
	buf = append(buf, b.name...)
	buf = append(buf, ' ')
	y, m, d := lt.Date()
	switch b.name {
	case "hour":
		buf = appendDate(buf, y, int(m), d)
		buf = append(buf, ' ')
		buf = appendPad(buf, lt.Hour(), 2)
		buf = append(buf, ":00"...)
	case "day":
		buf = appendDate(buf, y, int(m), d)
	case "ISO week":
		iy, iw := lt.ISOWeek()
		buf = appendPad(buf, iy, 4)
		buf = append(buf, "-W"...)
		buf = appendPad(buf, iw, 2)
	case "month":
		buf = appendPad(buf, y, 4)
		buf = append(buf, '-')
		buf = appendPad(buf, int(m), 2)
	case "year":
		buf = appendPad(buf, y, 4)
	}
	buf = append(buf, " ("...)
	buf = strconv.AppendInt(buf, int64(b.used), 10)
	buf = append(buf, '/')
	buf = strconv.AppendInt(buf, int64(b.n), 10)
	buf = append(buf, ')')
	return string(buf)
}

// oldestReason says why the rule kept the oldest snapshot, which shares its bucket with a newer
// one it kept: the rule is not filled, and restic 0.16 and later keep the oldest then.
func (b *bucket) oldestReason() string {
	return "oldest snapshot, kept because the " + b.rule + " rule is not filled (" +
		strconv.Itoa(b.used) + "/" + strconv.Itoa(b.n) + "), as restic forget 0.16 and later keep it"
}

func appendDate(buf []byte, y, m, d int) []byte {
	buf = appendPad(buf, y, 4)
	buf = append(buf, '-')
	buf = appendPad(buf, m, 2)
	buf = append(buf, '-')
	return appendPad(buf, d, 2)
}

// appendPad appends n with at least width digits.
func appendPad(buf []byte, n, width int) []byte {
	if n < 0 {
		buf = append(buf, '-')
		n = -n
	}
	s := strconv.Itoa(n)
	for i := len(s); i < width; i++ {
		buf = append(buf, '0')
	}
	return append(buf, s...)
}

// summary writes the plan's one-line summary.
func summary(p Plan, job string, unknownBytes bool) string {
	of := ""
	if job != "" {
		of = " of job " + job
	}
	total := p.Kept + p.Deletable
	var notes []string
	if p.Protected > 0 {
		if p.Deletable > 0 {
			notes = append(notes, plural(p.Protected, "more is protected", "more are protected"))
		} else {
			notes = append(notes, strconv.Itoa(p.Protected)+" only because protected")
		}
	}
	if p.OutsideScope > 0 {
		notes = append(notes, strconv.Itoa(p.OutsideScope)+" outside scope untouched")
	}
	note := ""
	if len(notes) > 0 {
		note = " (" + strings.Join(notes, "; ") + ")"
	}
	switch {
	case total == 0 && job != "":
		return "deletes nothing: job " + job + " has no snapshots in scope" + note
	case total == 0:
		return "deletes nothing: no snapshots in scope" + note
	case p.Deletable == 0 && total == 1:
		return "deletes nothing: the only snapshot" + of + " is kept" + note
	case p.Deletable == 0:
		return "deletes nothing: all " + strconv.Itoa(total) + " snapshots" + of + " are kept" + note
	}
	s := "deletes " + strconv.Itoa(p.Deletable) + " of " + strconv.Itoa(total) + " snapshots" + of + note
	switch {
	case p.ReclaimableBytes == 0:
		return s + "; reclaimed space unknown"
	case unknownBytes:
		return s + "; reclaims at least ~" + FormatBytes(p.ReclaimableBytes)
	}
	return s + "; reclaims ~" + FormatBytes(p.ReclaimableBytes)
}

// FormatBytes writes n in binary units with one decimal: "1.2 GiB", "512 B".
func FormatBytes(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	const units = "KMGTPE"
	v := float64(n) / 1024
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[i:i+1] + "iB"
}
