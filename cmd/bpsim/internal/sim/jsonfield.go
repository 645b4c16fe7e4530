package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// jsonError turns a syntax error into a *ScenarioError.
func jsonError(err error) error {
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn):
		return &ScenarioError{Problem: fmt.Sprintf("not valid JSON at byte %d: %v", syn.Offset, err)}
	case errors.Is(err, io.EOF):
		return &ScenarioError{Problem: "empty file: want a JSON object"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &ScenarioError{Problem: "truncated JSON"}
	}
	return &ScenarioError{Problem: err.Error()}
}

// fieldPath joins a JSON path and a field name: "tenants[0]" and "quota"
// make "tenants[0].quota".
func fieldPath(at, name string) string {
	if at == "" {
		return name
	}
	return at + "." + name
}

// describe says what a JSON value is, for "want …, got …" messages:
// the number itself, a quoted string, true, null, "an array", "an object".
func describe(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "string " + string(raw)
	case '[':
		return "an array"
	case '{':
		return "an object"
	}
	return string(raw)
}

// decodeObject decodes the JSON object raw at path at, calling the decoder
// of each field in fields, in the order the fields appear. An unknown or
// repeated field, or a value that is not an object, is a *ScenarioError.
func decodeObject(raw json.RawMessage, at string, fields map[string]func(json.RawMessage, string) error) error {
	where := at
	if where == "" {
		where = "(top level)"
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return &ScenarioError{Field: where, Problem: "want an object, got " + describe(raw)}
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return jsonError(err)
		}
		name, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return jsonError(err)
		}
		f, ok := fields[name]
		switch {
		case !ok:
			return &ScenarioError{Field: fieldPath(at, name), Problem: "unknown field (see bpsim -h for the format)"}
		case seen[name]:
			return &ScenarioError{Field: fieldPath(at, name), Problem: "given twice"}
		}
		seen[name] = true
		if err := f(val, fieldPath(at, name)); err != nil {
			return err
		}
	}
	return nil
}

// intField decodes an integer into *dst.
func intField(dst **int) func(json.RawMessage, string) error {
	return func(raw json.RawMessage, at string) error {
		var n json.Number
		if isNumber(raw) && json.Unmarshal(raw, &n) == nil {
			if v, err := strconv.Atoi(n.String()); err == nil {
				*dst = &v
				return nil
			}
		}
		return &ScenarioError{Field: at, Problem: "want an integer, got " + describe(raw)}
	}
}

// isNumber reports whether raw is a JSON number (json.Number would also
// take a string holding one).
func isNumber(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9')
}

// floatField decodes a number into *dst.
func floatField(dst **float64) func(json.RawMessage, string) error {
	return func(raw json.RawMessage, at string) error {
		var n json.Number
		if isNumber(raw) && json.Unmarshal(raw, &n) == nil {
			if v, err := n.Float64(); err == nil {
				*dst = &v
				return nil
			}
		}
		return &ScenarioError{Field: at, Problem: "want a number, got " + describe(raw)}
	}
}

// stringField decodes a string into *dst.
func stringField(dst **string) func(json.RawMessage, string) error {
	return func(raw json.RawMessage, at string) error {
		var v string
		if bytes.HasPrefix(bytes.TrimSpace(raw), []byte(`"`)) && json.Unmarshal(raw, &v) == nil {
			*dst = &v
			return nil
		}
		return &ScenarioError{Field: at, Problem: "want a string, got " + describe(raw)}
	}
}

// boolField decodes a JSON boolean into *dst.
func boolField(dst **bool) func(json.RawMessage, string) error {
	return func(raw json.RawMessage, at string) error {
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return &ScenarioError{Field: at, Problem: "want true or false, got " + describe(raw)}
		}
		*dst = &b
		return nil
	}
}

// arrayField decodes an array, calling elem for each element with its
// path ("tenants[2]"); empty is called first, so that an empty array is
// told from a missing one.
func arrayField(elem func(json.RawMessage, string) error, empty func()) func(json.RawMessage, string) error {
	return func(raw json.RawMessage, at string) error {
		var elems []json.RawMessage
		if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")) || json.Unmarshal(raw, &elems) != nil {
			return &ScenarioError{Field: at, Problem: "want an array, got " + describe(raw)}
		}
		empty()
		for i, e := range elems {
			if err := elem(e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
		return nil
	}
}

// intMapField decodes an object of integers into *dst.
func intMapField(dst *map[string]int) func(json.RawMessage, string) error {
	return func(raw json.RawMessage, at string) error {
		m := map[string]int{}
		fields := map[string]func(json.RawMessage, string) error{}
		// decodeObject wants the names first: collect them.
		var names map[string]json.RawMessage
		if json.Unmarshal(raw, &names) != nil {
			return &ScenarioError{Field: at, Problem: "want an object of tenant names to integers, got " + describe(raw)}
		}
		for name := range names {
			fields[name] = func(raw json.RawMessage, at string) error {
				var v *int
				if err := intField(&v)(raw, at); err != nil {
					return err
				}
				m[name] = *v
				return nil
			}
		}
		if err := decodeObject(raw, at, fields); err != nil {
			return err
		}
		*dst = m
		return nil
	}
}

// parseDuration parses *s, or returns def when s is nil (left out).
func parseDuration(field string, s *string, def time.Duration) (time.Duration, error) {
	if s == nil {
		return def, nil
	}
	d, err := time.ParseDuration(*s)
	if err != nil {
		return 0, &ScenarioError{Field: field, Problem: fmt.Sprintf("%q is not a duration (want e.g. \"100ms\", \"2s\", \"1m30s\")", *s)}
	}
	return d, nil
}

// orInt returns *v, or def when v is nil (left out).
func orInt(v *int, def int) int {
	if v == nil {
		return def
	}
	return *v
}

// ptr returns a pointer to a copy of v.
func ptr[T any](v T) *T { return &v }
