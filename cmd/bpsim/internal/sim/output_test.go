package sim

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func text(s string) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
}

// TestWriteFilesAllOrNothing checks that a failure while rendering leaves
// the output directory exactly as it was: no new file, no staging left.
func TestWriteFilesAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	_, err := writeFiles(dir, []outputFile{
		{"a.txt", text("new")},
		{"b.txt", func(io.Writer) error { return boom }},
	})
	if !errors.Is(err, boom) {
		t.Fatalf("writeFiles = %v, want the rendering error", err)
	}
	if got := dirNames(t, dir); !slices.Equal(got, []string{"a.txt"}) {
		t.Errorf("after a failed write the directory holds %v, want only the old a.txt", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "old" {
		t.Errorf("a.txt = %q after a failed write, want it unchanged", b)
	}
}

func TestWriteFilesReplacesAndKeepsOthers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "out")
	_, err := writeFiles(dir, []outputFile{{"a.txt", text("1")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mine.txt"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	paths, err := writeFiles(dir, []outputFile{{"a.txt", text("2")}, {"b.txt", text("3")}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")}; !slices.Equal(paths, want) {
		t.Errorf("paths = %v, want %v", paths, want)
	}
	if got := dirNames(t, dir); !slices.Equal(got, []string{"a.txt", "b.txt", "mine.txt"}) {
		t.Errorf("directory holds %v", got)
	}
	for name, want := range map[string]string{"a.txt": "2", "b.txt": "3", "mine.txt": "keep"} {
		if b, _ := os.ReadFile(filepath.Join(dir, name)); string(b) != want {
			t.Errorf("%s = %q, want %q", name, b, want)
		}
	}
}

func TestWriteFilesRefusesAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := writeFiles(path, []outputFile{{"a.txt", text("1")}}); !errors.Is(err, ErrOutDir) {
		t.Errorf("writeFiles into a regular file = %v, want ErrOutDir", err)
	}
}

// TestPrepareOutDirAbort checks that abort removes the staging directory
// and the directories prepareOutDir created, and nothing else.
func TestPrepareOutDirAbort(t *testing.T) {
	root := t.TempDir()
	o, err := prepareOutDir(filepath.Join(root, "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if got := dirNames(t, filepath.Join(root, "a", "b")); len(got) != 1 {
		t.Fatalf("prepared directory holds %v, want the staging directory", got)
	}
	o.abort()
	if got := dirNames(t, root); len(got) != 0 {
		t.Errorf("after abort %s holds %v, want nothing", root, got)
	}

	// An existing directory stays, with what it held.
	if err := os.WriteFile(filepath.Join(root, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if o, err = prepareOutDir(root); err != nil {
		t.Fatal(err)
	}
	o.abort()
	if got := dirNames(t, root); !slices.Equal(got, []string{"keep"}) {
		t.Errorf("after abort %s holds %v, want only keep", root, got)
	}
}
