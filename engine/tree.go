package engine

import (
	"io/fs"
	"path/filepath"
	"time"
)

// TreeProgress measures the progress of an engine that writes a tree under dir and reports none
// itself (restic 0.14's restore): the regular files and their bytes under dir so far, against
// totals if they are known (0: unknown). It follows no link. Run inside the unit, as the job's
// user: the tree is that user's.
func TreeProgress(dir string, totalBytes, totalFiles int64) func() (Progress, bool) {
	began := time.Now()
	return func() (Progress, bool) {
		var p Progress
		err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // a file restic is replacing; the next measure counts it
			}
			if !d.Type().IsRegular() {
				return nil
			}
			if info, err := d.Info(); err == nil {
				p.FilesDone++
				p.BytesDone += info.Size()
			}
			return nil
		})
		if err != nil {
			return Progress{}, false
		}
		p.TotalBytes, p.TotalFiles = totalBytes, totalFiles
		if totalBytes > 0 {
			p.PercentDone = min(1, float64(p.BytesDone)/float64(totalBytes))
		}
		p.SecondsElapsed = time.Since(began).Seconds()
		return p, true
	}
}
