package reconcile

// UnitsLastPass is how many units r's last pass asked systemd about: where it is not 0, the
// next pass asks about all of holdfast's units while it reads the runs.
func UnitsLastPass(r *Reconciler) int64 { return r.unitsLastPass.Load() }
