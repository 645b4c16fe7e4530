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
	"slices"

	"gonum.org/v1/plot"
)

// Output file names inside the output directory.
const (
	ReportFile = "report.json" // every figure of the run
	ChartFile  = "bpsim.png"   // every policy's chart, stacked
)

// StartsChartFile is every policy's chart of rows started per second,
// stacked, written when the scenario has rates.
const StartsChartFile = "starts.png"

// PolicyStartsChartFile is the name of one policy's starts chart.
func PolicyStartsChartFile(p Policy) string { return string(p) + "-starts.png" }

// PolicyChartFile is the name of one policy's chart.
func PolicyChartFile(p Policy) string { return string(p) + ".png" }

// outputFile is one file to write.
type outputFile struct {
	name  string
	write func(io.Writer) error
}

// writeOutputs writes report.json, the combined chart and a chart per
// policy into o (see [outDir.commit]) and returns their paths.
func writeOutputs(o *outDir, r *Report) ([]string, error) {
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
	if r.Scenario.hasDownstreams() {
		files = append(files, outputFile{DownstreamChartFile, func(w io.Writer) error { return writeDownstreamPNG(w, r) }})
	}
	if r.Scenario.hasRates() {
		sMax := startsYMax(r)
		files = append(files, outputFile{StartsChartFile, func(w io.Writer) error {
			var pls []*plot.Plot
			for _, p := range r.Policies {
				pl, err := startsPlot(r.Scenario, p, xMax, sMax)
				if err != nil {
					return err
				}
				pls = append(pls, pl)
			}
			return writeStackedPNG(w, pls)
		}})
		for _, p := range r.Policies {
			files = append(files, outputFile{PolicyStartsChartFile(p.Policy), func(w io.Writer) error {
				pl, err := startsPlot(r.Scenario, p, xMax, sMax)
				if err != nil {
					return err
				}
				return writePlotPNG(w, pl)
			}})
		}
	}
	return o.commit(files)
}

// ErrOutDir matches the error [Run] returns, before simulating anything,
// when the output directory cannot be used: it is a file, or it or its
// staging area cannot be created.
var ErrOutDir = errors.New("bpsim: bad output directory")

// outDir is an output directory made ready before a run: the directory
// exists and holds an empty staging directory. [outDir.commit] renders the
// files into the staging directory and renames them in; [outDir.abort]
// undoes what prepareOutDir did.
type outDir struct {
	dir     string
	stage   string
	created []string // directories prepareOutDir created, deepest last
}

// prepareOutDir checks dir, creates it and its missing parents, and makes
// its staging directory. Its error matches [ErrOutDir].
func prepareOutDir(dir string) (*outDir, error) {
	bad := func(err error) (*outDir, error) { return nil, fmt.Errorf("%w: %w", ErrOutDir, err) }
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return bad(&fs.PathError{Op: "write", Path: dir, Err: errors.New("not a directory")})
	}
	var missing []string
	for d := filepath.Clean(dir); ; {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		missing = append(missing, d)
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	slices.Reverse(missing)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return bad(err)
	}
	o := &outDir{dir: dir, created: missing}
	stage, err := os.MkdirTemp(dir, ".bpsim-staging-")
	if err != nil {
		o.abort()
		return bad(err)
	}
	o.stage = stage
	return o, nil
}

// abort removes the staging directory and the directories prepareOutDir
// created, if they are still empty, leaving things as they were.
func (o *outDir) abort() {
	if o.stage != "" {
		os.RemoveAll(o.stage)
	}
	for i := len(o.created) - 1; i >= 0; i-- {
		if os.Remove(o.created[i]) != nil {
			break
		}
	}
}

// commit renders every file into the staging directory and only then
// renames them into the directory, so it never holds a half-written file
// and, if any rendering fails, nothing in it changes. Files in it that are
// not among files are left alone. It returns the paths written, and removes
// the staging directory in any case.
func (o *outDir) commit(files []outputFile) ([]string, error) {
	defer os.RemoveAll(o.stage)
	for _, f := range files {
		var buf bytes.Buffer
		if err := f.write(&buf); err != nil {
			return nil, fmt.Errorf("bpsim: rendering %s: %w", f.name, err)
		}
		if err := os.WriteFile(filepath.Join(o.stage, f.name), buf.Bytes(), 0o644); err != nil {
			return nil, fmt.Errorf("bpsim: output: %w", err)
		}
	}
	var paths []string
	for _, f := range files {
		dst := filepath.Join(o.dir, f.name)
		if err := os.Rename(filepath.Join(o.stage, f.name), dst); err != nil {
			return paths, fmt.Errorf("bpsim: output: %w", err)
		}
		paths = append(paths, dst)
	}
	return paths, nil
}

// writeFiles prepares dir and commits files into it (see [outDir.commit]).
func writeFiles(dir string, files []outputFile) ([]string, error) {
	o, err := prepareOutDir(dir)
	if err != nil {
		return nil, err
	}
	return o.commit(files)
}
