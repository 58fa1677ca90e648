package model

// JobChange is one recorded change of a job (ConfigApply).
type JobChange struct {
	At            string // RFC 3339, the database's clock
	Actor, Action string
	Fields        []string
	Source, Hash  string
}

// Compacted counts what HistoryCompact removed.
type Compacted struct {
	Runs          int64 // ended runs, with their attempts
	LedgerEntries int64 // their holds and settlements, and grants, folded into checkpoints
	Events        int64
	Deliveries    int64 // delivered deliveries of those events
	Plans         int64 // retention plans
}

// Total is how many rows were removed.
func (c Compacted) Total() int64 {
	return c.Runs + c.LedgerEntries + c.Events + c.Deliveries + c.Plans
}
