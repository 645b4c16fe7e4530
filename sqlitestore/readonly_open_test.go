package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/outboxkit/backpressure/outbox"
)

// readOnlyChildEnv, when set to a path, makes TestOpenReadOnlyFile the
// child that opens that path read-write and prints what Open returned.
const readOnlyChildEnv = "SQLITESTORE_READONLY_OPEN_CHILD"

// nobodyID is the user and group the root-run test opens the file as.
const nobodyID = 65534

// TestOpenReadOnlyFile: a read-write Open of an outbox file its user cannot
// write (chmod 0444) fails with a *FileError (SQLITE_READONLY) matching
// ErrDatabaseFile, rather than succeeding until the first write (issue 29,
// item 10). Root writes a 0444 file anyway, so run as root the test opens
// it in a child process run as nobody, owner of the file and its
// directory: the user's own read-only file.
func TestOpenReadOnlyFile(t *testing.T) {
	if path := os.Getenv(readOnlyChildEnv); path != "" {
		fmt.Println(openOutcome(path))
		return
	}
	path := newOutboxFile(t)
	if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
	var got string
	if os.Getuid() != 0 {
		got = openOutcome(path)
	} else {
		got = openAsNobody(t, path)
	}
	if want := "FileError " + strconv.Itoa(sqliteReadOnly) + " " + path; !strings.HasPrefix(got, want) {
		t.Fatalf("Open(%q) of a 0444 file: %s; want %s: a *FileError matching ErrDatabaseFile, code SQLITE_READONLY", path, got, want)
	}
	// Read-only, the same file opens, and reads.
	s := openT(t, path, Options{ReadOnly: true})
	if r, err := s.Get(t.Context(), "k"); err != nil || r.State != outbox.StatePending {
		t.Errorf("Get(k) through a read-only Open = %+v, %v; want the pending row", r, err)
	}
}

// openOutcome opens path read-write and describes the outcome on one line:
// "opened" (closing the store), "FileError <primary code> <path>: <error>",
// or "error: <error>".
func openOutcome(path string) string {
	s, err := Open(context.Background(), path, Options{})
	var fe *FileError
	switch {
	case err == nil:
		_ = s.Close()
		return "opened"
	case errors.As(err, &fe) && errors.Is(err, ErrDatabaseFile):
		return fmt.Sprintf("FileError %d %s: %v", fe.Code&0xff, fe.Path, err)
	}
	return "error: " + err.Error()
}

// openAsNobody runs openOutcome on path in a copy of the test binary run
// as nobody, after giving nobody the file and its directory (and the way
// to them), and returns its line.
func openAsNobody(t *testing.T, path string) string {
	t.Helper()
	dir := filepath.Dir(path)
	bin := filepath.Join(t.TempDir(), "child.test")
	copyExecutable(t, bin)
	for _, d := range []string{dir, filepath.Dir(bin), filepath.Dir(dir), filepath.Dir(filepath.Dir(bin))} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{dir, path} {
		if err := os.Chown(p, nobodyID, nobodyID); err != nil {
			t.Skipf("cannot give %s to nobody (%v): the read-only file cannot be made", p, err)
		}
	}
	cmd := exec.Command(bin, "-test.run=^TestOpenReadOnlyFile$")
	cmd.Env = append(os.Environ(), readOnlyChildEnv+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobodyID, Gid: nobodyID}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the child run as nobody: %v\n%s", err, out)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return line
}

// copyExecutable copies the running test binary to bin, executable by all.
func copyExecutable(t *testing.T, bin string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
