package reconcile

// StopWatching stops every repository watch of the runaway guard, for a daemon that stops: the
// next daemon's first pass arms them again for the attempts still live.
func (r *Reconciler) StopWatching() {
	r.pruneWatchers(nil)
}
