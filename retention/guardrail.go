package retention

import (
	"fmt"
	"math"
	"strconv"

	"github.com/holdfast-backup/holdfast/setting"
)

// Guardrail refuses plans that delete suspiciously much, such as a policy
// typed with the wrong unit or a scope that matched the wrong snapshots.
type Guardrail struct {
	// MaxDeleteShare is the largest share of the in-scope snapshots a plan may
	// delete, between 0 and 1; zero means the default, 0.5.
	MaxDeleteShare float64
	// MinKeep is how many in-scope snapshots must remain at least (0 = no
	// minimum beyond the newest, which a plan always keeps).
	MinKeep int
}

// Guardrail defaults: a job's, unless it sets its own.
const (
	// DefaultMaxDeleteShare is the share Guardrail allows when MaxDeleteShare is zero.
	DefaultMaxDeleteShare = 0.5
	// DefaultMinKeep is how many in-scope snapshots a job's plans must leave.
	DefaultMinKeep = 1
)

// MaxDeleteShare reads a guardrail's largest share to delete as operators give it: a
// percentage from 1 to 100.
func MaxDeleteShare(percent int) (float64, error) {
	if percent < 1 || percent > 100 {
		return 0, setting.Errorf("{Guardrail.MaxDeleteShare} %d: give a percentage from 1 to 100", percent)
	}
	return float64(percent) / 100, nil
}

// CheckMinKeep refuses a negative guardrail minimum.
func CheckMinKeep(n int) error {
	if n < 0 {
		return setting.Errorf("{Guardrail.MinKeep} %d: give 0 or more", n)
	}
	return nil
}

// RefusedError is the error of a plan a Guardrail refuses.
type RefusedError struct {
	Deletes        int     // in-scope snapshots the plan deletes
	InScope        int     // in-scope snapshots of the plan
	MaxDeleteShare float64 // the share that was allowed
	MinKeep        int     // the minimum that had to remain
	TooFew         bool    // refused for MinKeep; otherwise for MaxDeleteShare
}

func (e *RefusedError) Error() string {
	what := setting.Render(": check the policy with `holdfast retention plan`, or apply with {RetentionApply.Force}")
	if e.TooFew {
		return fmt.Sprintf("plan keeps %d of %d snapshots, fewer than the minimum of %d%s",
			e.InScope-e.Deletes, e.InScope, e.MinKeep, what)
	}
	share := float64(e.Deletes) / float64(e.InScope)
	got, allowed := percent(share, 1), percent(e.MaxDeleteShare, 1)
	if got == allowed {
		got, allowed = percent(share, -1), percent(e.MaxDeleteShare, -1)
	}
	return fmt.Sprintf("plan deletes %d of %d snapshots (%s), more than the allowed %s%s",
		e.Deletes, e.InScope, got, allowed, what)
}

// percent writes f as a percentage with at most prec decimals (-1: as many
// as needed).
func percent(f float64, prec int) string {
	v := f * 100
	if prec >= 0 {
		p := math.Pow10(prec)
		v = math.Round(v*p) / p
	}
	return strconv.FormatFloat(v, 'f', -1, 64) + "%"
}

// Check returns a *RefusedError if p deletes more than the guardrail allows,
// an error if the guardrail itself is out of range, and nil otherwise. A plan
// that deletes nothing always passes.
func (g Guardrail) Check(p Plan) error {
	limit := g.MaxDeleteShare
	if limit == 0 {
		limit = DefaultMaxDeleteShare
	}
	if math.IsNaN(limit) || limit < 0 || limit > 1 {
		return fmt.Errorf("guardrail max delete share %v is out of range: give a share between 0 and 1 (0 means the default %v)", g.MaxDeleteShare, DefaultMaxDeleteShare)
	}
	if g.MinKeep < 0 {
		return fmt.Errorf("guardrail min keep %d is negative: give 0 or more", g.MinKeep)
	}
	if p.Deletable <= 0 {
		return nil
	}
	in := p.Kept + p.Deletable
	e := &RefusedError{Deletes: p.Deletable, InScope: in, MaxDeleteShare: limit, MinKeep: g.MinKeep}
	if float64(p.Deletable) > limit*float64(in) {
		return e
	}
	if p.Kept < g.MinKeep {
		e.TooFew = true
		return e
	}
	return nil
}
