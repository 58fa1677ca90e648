package retention

import (
	"errors"
	"math"
	"testing"
)

func TestGuardrail(t *testing.T) {
	tests := []struct {
		name string
		g    Guardrail
		p    Plan
		want string // "" = allowed
	}{
		{"default allows half", Guardrail{}, Plan{Kept: 20, Deletable: 20}, ""},
		{"default refuses more than half", Guardrail{}, Plan{Kept: 10, Deletable: 30},
			"plan deletes 30 of 40 snapshots (75%), more than the allowed 50%: check the policy with `holdfast retention plan`, or apply with RetentionApply.Force"},
		{"outside scope does not count", Guardrail{}, Plan{Kept: 10, Deletable: 11, OutsideScope: 100},
			"plan deletes 11 of 21 snapshots (52.4%), more than the allowed 50%: check the policy with `holdfast retention plan`, or apply with RetentionApply.Force"},
		{"close to the limit shows more digits", Guardrail{MaxDeleteShare: 0.5}, Plan{Kept: 4999, Deletable: 5001},
			"plan deletes 5001 of 10000 snapshots (50.01%), more than the allowed 50%: check the policy with `holdfast retention plan`, or apply with RetentionApply.Force"},
		{"custom share", Guardrail{MaxDeleteShare: 0.9}, Plan{Kept: 10, Deletable: 30}, ""},
		{"share of one allows all", Guardrail{MaxDeleteShare: 1}, Plan{Kept: 1, Deletable: 99}, ""},
		{"nothing deleted", Guardrail{MaxDeleteShare: 0.01, MinKeep: 100}, Plan{Kept: 3}, ""},
		{"min keep", Guardrail{MaxDeleteShare: 0.9, MinKeep: 5}, Plan{Kept: 3, Deletable: 7},
			"plan keeps 3 of 10 snapshots, fewer than the minimum of 5: check the policy with `holdfast retention plan`, or apply with RetentionApply.Force"},
		{"min keep met", Guardrail{MaxDeleteShare: 0.9, MinKeep: 3}, Plan{Kept: 3, Deletable: 7}, ""},
		{"protected count as kept", Guardrail{MinKeep: 3}, Plan{Kept: 3, Protected: 2, Deletable: 1}, ""},
	}
	for _, tt := range tests {
		err := tt.g.Check(tt.p)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: Check() = %v, want nil", tt.name, err)
			}
			continue
		}
		var refused *RefusedError
		if !errors.As(err, &refused) {
			t.Errorf("%s: Check() = %v, want a *RefusedError", tt.name, err)
			continue
		}
		if err.Error() != tt.want {
			t.Errorf("%s: Check()\n got %q\nwant %q", tt.name, err, tt.want)
		}
		if refused.Deletes != tt.p.Deletable || refused.InScope != tt.p.Kept+tt.p.Deletable {
			t.Errorf("%s: refusal has %d of %d", tt.name, refused.Deletes, refused.InScope)
		}
	}
}

func TestGuardrailOutOfRange(t *testing.T) {
	for _, g := range []Guardrail{{MaxDeleteShare: -0.1}, {MaxDeleteShare: 1.5}, {MaxDeleteShare: math.NaN()}, {MinKeep: -1}} {
		err := g.Check(Plan{Kept: 1, Deletable: 1})
		var refused *RefusedError
		if err == nil || errors.As(err, &refused) {
			t.Errorf("Check with %+v = %v, want an error that is not a refusal", g, err)
		}
	}
}

func TestGuardrailSettings(t *testing.T) {
	for _, c := range []struct {
		percent int
		want    float64
		err     string
	}{
		{1, 0.01, ""}, {50, DefaultMaxDeleteShare, ""}, {100, 1, ""},
		{0, 0, "Guardrail.MaxDeleteShare 0: give a percentage from 1 to 100"},
		{101, 0, "Guardrail.MaxDeleteShare 101: give a percentage from 1 to 100"},
		{-5, 0, "Guardrail.MaxDeleteShare -5: give a percentage from 1 to 100"},
	} {
		got, err := MaxDeleteShare(c.percent)
		if (err == nil) != (c.err == "") || (err != nil && err.Error() != c.err) || got != c.want {
			t.Errorf("MaxDeleteShare(%d) = %v, %v; want %v, %q", c.percent, got, err, c.want, c.err)
		}
	}
	for _, c := range []struct {
		n   int
		err string
	}{
		{0, ""}, {DefaultMinKeep, ""}, {1000, ""}, {-1, "Guardrail.MinKeep -1: give 0 or more"},
	} {
		if err := CheckMinKeep(c.n); (err == nil) != (c.err == "") || (err != nil && err.Error() != c.err) {
			t.Errorf("CheckMinKeep(%d) = %v, want %q", c.n, err, c.err)
		}
	}
}
