package model

import "encoding/json"

// RetentionSettings are a job's retention settings: the policy its retention plans apply and
// the bounds of one plan, which forget runs (KindForget) carry out.
type RetentionSettings struct {
	// Policy is the job's retention policy as package retention encodes it; nil: none set.
	Policy json.RawMessage
	// MaxDelete is the largest share of the job's snapshots one plan may delete without
	// --force; MinKeep the fewest it may leave.
	MaxDelete float64
	MinKeep   int
}
