package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/store"
)

// BenchmarkFleetScrape measures what a scrape of /metrics and `holdfast host list` read from a
// fleet's database (store.FiguresGet and store.HostList, the fleet-wide views) at 10, 100 and 1,000
// hosts (storetest.SeedFleet): the median of 5 reads each, and the growth from 10 to 1,000.
// These views are the fleet's, so they grow with it; one daemon is scraped, not all.
func BenchmarkFleetScrape(b *testing.B) {
	ctx := context.Background()
	f := newFleet(b, 100)
	st, err := store.Open(ctx, f.dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	perRead := map[string]map[int]time.Duration{"figures": {}, "hosts": {}}
	for _, size := range []int{10, 100, 1000} {
		f.grow(b, size)
		for name, read := range map[string]func() error{
			"figures": func() error { _, err := st.FiguresGet(ctx); return err },
			"hosts":   func() error { _, err := st.HostList(ctx); return err },
		} {
			var took []time.Duration
			for range 5 {
				start := time.Now()
				if err := read(); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			perRead[name][size] = median(took)
			b.ReportMetric(float64(median(took).Microseconds())/1000, fmt.Sprintf("%s-ms-%d-hosts", name, size))
		}
	}
	for name, by := range perRead {
		b.ReportMetric(float64(by[1000])/float64(by[10]), name+"-growth-10-to-1000")
	}
	b.ReportMetric(0, "ns/op")
}
