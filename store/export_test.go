package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// OpenTraced is Open with tracer seeing every statement the store runs, for tests that look at
// the statements themselves (their plans).
func OpenTraced(ctx context.Context, dsn string, tracer pgx.QueryTracer) (*Store, error) {
	return open(ctx, Address{DSN: dsn}, func(c *pgxpool.Config) { c.ConnConfig.Tracer = tracer })
}

// GenericPlans is the setting queryGeneric sends before a read.
const GenericPlans = genericPlans

// GenericTx begins a transaction whose statements run with their generic plans (inTxGeneric).
const GenericTx = genericTx

// MaintenanceSlots is the slot column of each repository schedule, by its name.
var MaintenanceSlots = maintenanceSlots
