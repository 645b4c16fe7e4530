package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Output file names inside the output directory.
const (
	ReportFile = "report.json" // every figure of the run
	ChartFile  = "bpsim.png"   // every policy's chart, stacked
)

// PolicyChartFile is the name of one policy's chart.
func PolicyChartFile(p Policy) string { return string(p) + ".png" }

// outputFile is one file to write.
type outputFile struct {
	name  string
	write func(io.Writer) error
}

// writeOutputs writes report.json, the combined chart and a chart per
// policy into dir (see [writeFiles]) and returns their paths.
func writeOutputs(dir string, r *Report) ([]string, error) {
	xMax, yMax := chartXMax(r), chartYMax(r)
	files := []outputFile{
		{ReportFile, func(w io.Writer) error {
			b, err := json.MarshalIndent(r, "", "  ")
			if err != nil {
				return err
			}
			_, err = w.Write(append(b, '\n'))
			return err
		}},
		{ChartFile, func(w io.Writer) error { return writeCombinedPNG(w, r) }},
	}
	for _, p := range r.Policies {
		files = append(files, outputFile{PolicyChartFile(p.Policy), func(w io.Writer) error {
			return writePolicyPNG(w, r.Scenario, p, xMax, yMax)
		}})
	}
	return writeFiles(dir, files)
}

// writeFiles renders every file into a staging directory inside dir and
// only then renames them into dir, so dir never holds a half-written file
// and, if any rendering fails, nothing in dir changes. Files in dir that
// are not among files are left alone. It returns the paths written.
func writeFiles(dir string, files []outputFile) ([]string, error) {
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("bpsim: output: %w", &fs.PathError{Op: "write", Path: dir, Err: errors.New("not a directory")})
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bpsim: output: %w", err)
	}
	stage, err := os.MkdirTemp(dir, ".bpsim-staging-")
	if err != nil {
		return nil, fmt.Errorf("bpsim: output: %w", err)
	}
	defer os.RemoveAll(stage)

	for _, f := range files {
		var buf bytes.Buffer
		if err := f.write(&buf); err != nil {
			return nil, fmt.Errorf("bpsim: rendering %s: %w", f.name, err)
		}
		if err := os.WriteFile(filepath.Join(stage, f.name), buf.Bytes(), 0o644); err != nil {
			return nil, fmt.Errorf("bpsim: output: %w", err)
		}
	}
	var paths []string
	for _, f := range files {
		dst := filepath.Join(dir, f.name)
		if err := os.Rename(filepath.Join(stage, f.name), dst); err != nil {
			return paths, fmt.Errorf("bpsim: output: %w", err)
		}
		paths = append(paths, dst)
	}
	return paths, nil
}
