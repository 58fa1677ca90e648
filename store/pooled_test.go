package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/testenv"
)

// Behind PgBouncer in transaction mode: the daemon's startup parameters are refused without a
// session address; with one, the pool sends none and has the database's bounds, its statements
// work, and LISTEN on the session hears what the pool's transactions notify.
func TestPooledAddress(t *testing.T) {
	ctx := context.Background()
	dsn := storetest.Migrated(t)
	// The database's own bound, set before the pooler opens a server connection to it: those
	// it has open keep the settings they started with.
	db := dial(t, dsn)
	var name string
	if err := db.QueryRow(ctx, `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` SET statement_timeout = '7s'`); err != nil {
		t.Fatal(err)
	}
	pooled := testenv.ThroughPgBouncer(t, dsn)

	if st, err := store.New(ctx, store.Config{Address: store.Address{DSN: pooled}}); err == nil {
		st.Close()
		t.Fatal("the pooler accepted the daemon's startup parameters: is it PgBouncer?")
	} else if !strings.Contains(err.Error(), "unsupported startup parameter") {
		t.Fatalf("without a session address: %v, want PgBouncer's refusal of a startup parameter", err)
	}
	st, err := store.New(ctx, store.Config{Address: store.Address{DSN: pooled, SessionDSN: dsn}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := st.Bounds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Statement != 7*time.Second || b.Lock != 0 {
		t.Fatalf("bounds behind the pooler = %+v, want the database's: statement 7s, no lock timeout", b)
	}

	woken := make(chan struct{}, 16)
	listenCtx, cancel := context.WithCancel(ctx)
	listened := make(chan error, 1)
	go func() {
		listened <- st.Listen(listenCtx, store.Wakes{Host: "h", Deliveries: func() {}, Runs: func() {
			select { // a wake while one is pending is the same wake: never block the listener
			case woken <- struct{}{}:
			default:
			}
		}})
	}()
	defer func() { cancel(); <-listened }()
	select {
	case <-woken: // the first call, once listening
	case err := <-listened:
		t.Fatalf("listen: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("not listening after a minute")
	}
	// The same statements again and again, each transaction on whichever server connection
	// the pooler gives it.
	for i := range 20 {
		storetest.Run(t, st, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Name: "job" + string(rune('a'+i)), Engine: "command"}})
	}
	select {
	case <-woken:
	case <-time.After(time.Minute):
		t.Fatal("a run admitted through the pooler woke no listener on the session")
	}
}
