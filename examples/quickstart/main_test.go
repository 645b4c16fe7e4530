package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain runs the program itself when the test binary is started with
// QUICKSTART_RUN_MAIN=1, so that TestOutput runs main exactly as a user does,
// log.Fatal and all, in a process of its own.
func TestMain(m *testing.M) {
	if os.Getenv("QUICKSTART_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// readme returns the README's quick start: its ```go block and the output
// block that follows it.
func readme(t *testing.T) (code, output string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatalf("reading the repository's README (this test runs inside a checkout): %v", err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Quick start\n")
	if !ok {
		t.Fatal(`README.md has no "## Quick start" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	code, ok = fenced(section, "```go\n")
	if !ok {
		t.Fatal("the README's Quick start has no ```go block")
	}
	_, rest, _ := strings.Cut(section, code)
	output, ok = fenced(rest, "```text\n")
	if !ok {
		t.Fatal("the README's Quick start has no ```text block after its ```go block")
	}
	return code, output
}

// fenced returns the body of the first block in s opened by fence.
func fenced(s, fence string) (string, bool) {
	_, body, ok := strings.Cut(s, fence)
	if !ok {
		return "", false
	}
	body, _, ok = strings.Cut(body, "\n```\n")
	return body, ok
}

// The README's code block is this program, byte for byte (but for the
// whitespace at either end), so what a user pastes is what CI runs.
func TestREADMEIsThisProgram(t *testing.T) {
	code, _ := readme(t)
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(code) != strings.TrimSpace(string(src)) {
		t.Errorf("the README's Quick start ```go block differs from examples/quickstart/main.go; copy main.go into the README\n%s",
			firstDifference(strings.TrimSpace(code), strings.TrimSpace(string(src))))
	}
}

// firstDifference names the first line at which a and b differ.
func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n  README:  %s\n  main.go: %s", i+1, x, y)
		}
	}
	return ""
}

// The program runs to its end and prints what the README says it prints:
// the order whose outbox row was refused is rolled back, and every order
// placed gets its email once.
func TestOutput(t *testing.T) {
	_, want := readme(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "QUICKSTART_RUN_MAIN=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("quickstart: %v\nstderr:\n%s", err, stderr.String())
	}
	if got := stdout.String(); strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("quickstart printed\n%s\nthe README says\n%s", got, want)
	}
	// The dispatcher's log (slog.Default, on stderr) says what it ran with
	// and what it did.
	for _, line := range []string{
		"INFO dispatch: run started workers=16 store=*sqlitestore.Store shards_owned=64 shard_count=64",
		"INFO dispatch: run stopped settled=4 retried=0 dead_lettered=0 lease_lost=0",
	} {
		if !strings.Contains(stderr.String(), line) {
			t.Errorf("quickstart's stderr lacks %q:\n%s", line, stderr.String())
		}
	}
}
