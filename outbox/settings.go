package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// CheckSettings reports whether s can be stored and applied, whole: nil,
// or an error matching [ErrInvalidConfig] for a Quota,
// Weight or Rate that [backpressure.Backpressure.SetConfig] would refuse
// (checked whether or not s is paused, so a pause cannot hide a quota of
// -5), or a [*SettingsFault] for a setting with Fault set. The values'
// rules do not depend on the rest of the configuration, so a setting
// that passes applies over any valid code configuration. Stores'
// PutSettings call it.
func CheckSettings(s NamespaceSettings) error {
	if s.Fault != "" {
		return &SettingsFault{Namespace: s.Namespace, Version: s.Version, Reason: s.Fault}
	}
	if p := s.AdaptivePin; p != nil && (*p < 1 || *p > MaxAdaptivePin) {
		return &ConfigError{Field: "AdaptivePin[" + strconv.Quote(s.Namespace) + "]", Value: *p,
			Reason: "must be between 1 and " + strconv.Itoa(MaxAdaptivePin)}
	}
	// The checks and their order are those of backpressure.New on a
	// Config with s applied (Quotas, then Rates, then Weights), whether or
	// not s is paused: a pause sets the quota to 0, which would hide a bad one.
	key := "[" + strconv.Quote(s.Namespace) + "]"
	if s.Quota != nil {
		if err := CheckNamespace("Quotas"+key, s.Namespace, *s.Quota); err != nil {
			return err
		}
		if err := CheckQuota("Quotas"+key, *s.Quota); err != nil {
			return err
		}
	}
	if s.Rate != nil {
		if err := CheckNamespace("Rates"+key, s.Namespace, s.Rate.Burst); err != nil {
			return err
		}
		if err := CheckRate("Rates"+key, *s.Rate); err != nil {
			return err
		}
	}
	if s.Weight != nil {
		if err := CheckNamespace("Weights"+key, s.Namespace, *s.Weight); err != nil {
			return err
		}
		if err := CheckWeight("Weights"+key, *s.Weight); err != nil {
			return err
		}
	}
	return nil
}

// EncodeSettings returns the JSON object sqlitestore and pgstore keep as a
// namespace's settings row:
// {"quota":n,"weight":n,"paused":true,"rate":{"per_second":f,"burst":n},"adaptive_pin":n},
// unset fields left out. Another store may keep its own format.
func EncodeSettings(s NamespaceSettings) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	add := func(k, v string) {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%s", k, v)
	}
	if s.Quota != nil {
		add("quota", fmt.Sprint(*s.Quota))
	}
	if s.Weight != nil {
		add("weight", fmt.Sprint(*s.Weight))
	}
	if s.Paused {
		add("paused", "true")
	}
	if s.Rate != nil {
		add("rate", fmt.Sprintf(`{"per_second":%s,"burst":%d}`, strconv.FormatFloat(s.Rate.PerSecond, 'g', -1, 64), s.Rate.Burst))
	}
	if s.AdaptivePin != nil {
		add("adaptive_pin", fmt.Sprint(*s.AdaptivePin))
	}
	b.WriteByte('}')
	return b.Bytes()
}

// MaxAdaptivePin bounds NamespaceSettings.AdaptivePin (1,048,576 rows, as
// dispatch.MaxAdaptiveStep bounds a pin made through the API).
const MaxAdaptivePin = 1 << 20

// DecodeSettings sets s's Quota, Weight, Paused, Rate and AdaptivePin from body, a row
// of [EncodeSettings]' format, and checks them ([CheckSettings]). When
// body is not a JSON object (JSON null, an array, a number, text), when
// one of its keys has JSON null or a value of the wrong type (a rate that
// is not an object of a number per_second and an integer burst, both
// given), when a key is
// given twice (keys match regardless of case, as encoding/json's do), or
// when the values do not validate, it leaves them unset and sets
// s.Fault to why instead. Keys it does not know (a newer version's) are
// ignored.
func DecodeSettings(s *NamespaceSettings, body []byte) {
	s.Quota, s.Weight, s.Paused, s.Rate, s.AdaptivePin, s.Fault = nil, nil, false, nil, nil, ""
	got, fault := decodeSettingsBody(body)
	if fault == "" {
		got.Namespace = s.Namespace
		if err := CheckSettings(got); err != nil {
			fault = err.Error()
		}
	}
	if fault != "" {
		s.Fault = fault
		return
	}
	s.Quota, s.Weight, s.Paused, s.Rate, s.AdaptivePin = got.Quota, got.Weight, got.Paused, got.Rate, got.AdaptivePin
}

// decodeSettingsBody reads body's known keys, or says why it cannot.
func decodeSettingsBody(body []byte) (NamespaceSettings, string) {
	var s NamespaceSettings
	var obj map[string]json.RawMessage
	var rawRate json.RawMessage
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return s, fmt.Sprintf("the row is not a JSON object: %.40q", body)
	}
	if err := json.Unmarshal(body, &obj); err != nil {
		return s, fmt.Sprintf("the row is not a JSON object: %v", err)
	}
	seen := map[string]bool{}
	for k, v := range obj {
		key := strings.ToLower(k)
		var dst any
		switch key {
		case "quota":
			s.Quota = new(int)
			dst = s.Quota
		case "weight":
			s.Weight = new(int)
			dst = s.Weight
		case "paused":
			dst = &s.Paused
		case "rate":
			dst = &rawRate
		case "adaptive_pin":
			s.AdaptivePin = new(int)
			dst = s.AdaptivePin
		default:
			continue
		}
		if seen[key] {
			return s, fmt.Sprintf("key %q is given twice", key)
		}
		seen[key] = true
		if string(bytes.TrimSpace(v)) == "null" {
			return s, fmt.Sprintf("%q is null", key)
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return s, fmt.Sprintf("%q: %v", key, err)
		}
	}
	if rawRate != nil {
		r, fault := decodeRate(rawRate)
		if fault != "" {
			return s, fault
		}
		s.Rate = &r
	}
	return s, ""
}

// decodeRate reads a settings row's rate: an object of a number
// per_second and an integer burst, both given and not null.
func decodeRate(body json.RawMessage) (Rate, string) {
	var r Rate
	var obj map[string]json.RawMessage
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return r, fmt.Sprintf(`"rate" is not a JSON object: %.40q`, body)
	}
	if err := json.Unmarshal(body, &obj); err != nil {
		return r, fmt.Sprintf(`"rate": %v`, err)
	}
	for _, f := range []struct {
		key string
		dst any
	}{{"per_second", &r.PerSecond}, {"burst", &r.Burst}} {
		v, ok := obj[f.key]
		if !ok || string(bytes.TrimSpace(v)) == "null" {
			return r, fmt.Sprintf(`"rate": %q is missing or null`, f.key)
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			return r, fmt.Sprintf(`"rate": %q: %v`, f.key, err)
		}
	}
	return r, ""
}

// DecodeNodeReport returns the report of node kept as body (JSON of
// [NodeReport], as sqlitestore and pgstore keep it), with Node set; when
// body is not a JSON object of a report (JSON null, an array, a field of
// the wrong type), the report has only Node and Fault, saying why.
func DecodeNodeReport(node string, body []byte) NodeReport {
	var r NodeReport
	var err error
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		err = fmt.Errorf("not a JSON object: %.40q", body)
	} else {
		err = json.Unmarshal(body, &r)
	}
	if err != nil {
		return NodeReport{Node: node, Fault: "the report cannot be read: " + err.Error()}
	}
	r.Node, r.Fault = node, ""
	return r
}

// CheckPutSettings returns an [*ArgumentError] of pkg's op (Arg "set")
// when [CheckSettings] refuses s; the error then also matches what
// CheckSettings returned ([ErrInvalidConfig], or
// [ErrBadSettings] for a Fault a caller set). Stores' PutSettings call it
// after checking the namespace.
func CheckPutSettings(pkg, op string, s NamespaceSettings) error {
	if err := CheckSettings(s); err != nil {
		return &ArgumentError{Pkg: pkg, Op: op, Arg: "set", Reason: err.Error(), Err: err}
	}
	return nil
}

// SettingsCapError is the [*ArgumentError] of pkg's op for a PutSettings
// of a new namespace when the store holds [MaxSettings] namespaces with
// settings; it also matches [ErrTooManySettings].
func SettingsCapError(pkg, op, namespace string) error {
	return &ArgumentError{Pkg: pkg, Op: op, Arg: "set.Namespace", Err: ErrTooManySettings,
		Reason: fmt.Sprintf("%q would be beyond the %d namespaces with settings a store keeps", namespace, MaxSettings)}
}

// SettingsOverflowError is the error ListSettings returns with the first
// [MaxSettings] rows when the store holds more: it matches
// [ErrTooManySettings].
func SettingsOverflowError(pkg string) error {
	return fmt.Errorf("%s: ListSettings: %w: the store holds more than %d settings rows (written by other means than PutSettings); the rows after the first %d are not read",
		pkg, ErrTooManySettings, MaxSettings, MaxSettings)
}
