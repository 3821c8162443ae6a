package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// counts is what the server saw since the last reset. Records are counted per service and
// destination when the call that carries them is answered with success, so a failed or
// unanswered call (which the sink sends again) is not counted: the totals equal what a
// benchmark's input should have put into each destination.
type counts struct {
	mu sync.Mutex
	// records[service][destination]: records accepted (messages, rows, entries, tasks,
	// mutation rows).
	records map[string]map[string]int64
	// refused[service][destination]: records in requests refused for a reject marker; a
	// record may be counted once per request it came in (sinks that split a refused request
	// to find the guilty record send it several times).
	refused map[string]map[string]int64
	// calls[method]: requests received (each AppendRows request counts, not the stream).
	calls map[string]int64
	// failed[method]: calls failed on purpose (fail rules).
	failed map[string]int64
	// unimplemented[method]: calls to a method this server does not serve.
	unimplemented map[string]int64
	// streams[method]: streams opened; openStreams: open now.
	streams     map[string]int64
	openStreams map[string]int64
	since       time.Time
}

func newCounts() *counts {
	c := &counts{}
	c.reset()
	return c
}

func (c *counts) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.records = map[string]map[string]int64{}
	c.refused = map[string]map[string]int64{}
	c.calls = map[string]int64{}
	c.failed = map[string]int64{}
	c.unimplemented = map[string]int64{}
	c.streams = map[string]int64{}
	open := c.openStreams
	c.openStreams = map[string]int64{}
	for k, v := range open { // open streams outlive a reset
		c.openStreams[k] = v
	}
	c.since = time.Now()
}

func add(m map[string]map[string]int64, service, destination string, n int64) {
	byDest := m[service]
	if byDest == nil {
		byDest = map[string]int64{}
		m[service] = byDest
	}
	byDest[destination] += n
}

func (c *counts) accepted(service, destination string, n int64) {
	if n == 0 {
		return
	}
	c.mu.Lock()
	add(c.records, service, destination, n)
	c.mu.Unlock()
}

func (c *counts) acceptedMany(service string, byDest map[string]int64) {
	c.mu.Lock()
	for d, n := range byDest {
		add(c.records, service, d, n)
	}
	c.mu.Unlock()
}

func (c *counts) refusedRecords(service, destination string, n int64) {
	c.mu.Lock()
	add(c.refused, service, destination, n)
	c.mu.Unlock()
}

func (c *counts) call(method string) {
	c.mu.Lock()
	c.calls[method]++
	c.mu.Unlock()
}

func (c *counts) failedCall(method string) {
	c.mu.Lock()
	c.failed[method]++
	c.mu.Unlock()
}

func (c *counts) unimplementedCall(method string) {
	c.mu.Lock()
	c.unimplemented[method]++
	c.mu.Unlock()
}

func (c *counts) streamOpened(method string) {
	c.mu.Lock()
	c.streams[method]++
	c.openStreams[method]++
	c.mu.Unlock()
}

func (c *counts) streamClosed(method string) {
	c.mu.Lock()
	c.openStreams[method]--
	c.mu.Unlock()
}

// snapshot is the JSON of GET /_counts.
func (c *counts) snapshot(conns *connCounter) map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	copyNested := func(m map[string]map[string]int64) map[string]map[string]int64 {
		out := make(map[string]map[string]int64, len(m))
		for s, byDest := range m {
			inner := make(map[string]int64, len(byDest))
			for d, n := range byDest {
				inner[d] = n
			}
			out[s] = inner
		}
		return out
	}
	copyFlat := func(m map[string]int64) map[string]int64 {
		out := make(map[string]int64, len(m))
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	return map[string]any{
		"records":       copyNested(c.records),
		"refused":       copyNested(c.refused),
		"calls":         copyFlat(c.calls),
		"failed_calls":  copyFlat(c.failed),
		"unimplemented": copyFlat(c.unimplemented),
		"streams":       copyFlat(c.streams),
		"open_streams":  copyFlat(c.openStreams),
		"connections":   conns.snapshot(),
		"seconds":       time.Since(c.since).Seconds(),
	}
}

// failRule fails calls of a method on purpose: the nth call (1-based, counted from when the
// rule was set) and the times-1 after it end with code.
type failRule struct {
	// Method is matched as a suffix of the full method name: "Publish" or
	// "/google.pubsub.v1.Publisher/Publish".
	Method string `json:"method"`
	Nth    int64  `json:"nth"`
	Times  int64  `json:"times"`
	Code   string `json:"code"`
	seen   atomic.Int64
	code   codes.Code
}

// spannerColumn is one column of the tables the Spanner schema query answers with.
type spannerColumn struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// spannerSchema is what INFORMATION_SCHEMA holds: every named table has these columns and
// this primary key.
type spannerSchema struct {
	Tables  []string        `json:"tables"`
	Columns []spannerColumn `json:"columns"`
	Key     []string        `json:"key"`
}

// config is what a benchmark can set at start (flags) and change between jobs (PUT /_config).
type config struct {
	LatencyMS    float64         `json:"latency_ms"`
	RejectMarker string          `json:"reject_marker"`
	Fail         []*failRule     `json:"fail"`
	BigQuery     json.RawMessage `json:"bigquery_schema"`
	Spanner      spannerSchema   `json:"spanner"`
	// QuotaErrors fails a share of the write calls with RESOURCE_EXHAUSTED for a while.
	QuotaErrors *quotaRule `json:"quota_errors"`

	latency time.Duration
	marker  []byte
	// The three answers of the Spanner sink's schema queries, encoded once.
	spannerTables, spannerColumns, spannerKeys []byte
}

var codeByName = func() map[string]codes.Code {
	m := map[string]codes.Code{}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		m[strings.ToUpper(strings.ReplaceAll(c.String(), " ", "_"))] = c
	}
	// codes.Code.String() spells some names in CamelCase: map them to the API's spelling.
	for name, c := range map[string]codes.Code{
		"INVALID_ARGUMENT": codes.InvalidArgument, "DEADLINE_EXCEEDED": codes.DeadlineExceeded,
		"NOT_FOUND": codes.NotFound, "ALREADY_EXISTS": codes.AlreadyExists,
		"PERMISSION_DENIED": codes.PermissionDenied, "RESOURCE_EXHAUSTED": codes.ResourceExhausted,
		"FAILED_PRECONDITION": codes.FailedPrecondition, "OUT_OF_RANGE": codes.OutOfRange,
		"DATA_LOSS": codes.DataLoss, "UNAVAILABLE": codes.Unavailable,
	} {
		m[name] = c
	}
	return m
}()

// prepare validates the configuration and computes its derived fields.
func (cfg *config) prepare() error {
	cfg.latency = time.Duration(cfg.LatencyMS * float64(time.Millisecond))
	cfg.marker = nil
	if cfg.RejectMarker != "" {
		cfg.marker = []byte(cfg.RejectMarker)
	}
	for _, r := range cfg.Fail {
		name := strings.ToUpper(r.Code)
		if name == "" {
			name = "UNAVAILABLE"
		}
		code, ok := codeByName[name]
		if !ok {
			return status.Errorf(codes.InvalidArgument, "unknown status code %q", r.Code)
		}
		r.code = code
		if r.Times <= 0 {
			r.Times = 1
		}
		if r.Nth <= 0 {
			r.Nth = 1
		}
	}
	if len(cfg.BigQuery) == 0 {
		cfg.BigQuery = json.RawMessage(`[{"name":"payload","type":"STRING","mode":"NULLABLE"}]`)
	}
	var fields []map[string]any
	if err := json.Unmarshal(cfg.BigQuery, &fields); err != nil {
		return status.Errorf(codes.InvalidArgument, "bigquery_schema: %v", err)
	}
	cfg.spannerTables, cfg.spannerColumns, cfg.spannerKeys = encodeSpannerSchema(cfg.Spanner)
	return nil
}

// settings holds the configuration in force; calls read it without a lock.
type settings struct {
	mu  sync.Mutex // serialises updates
	cur atomic.Pointer[config]
}

func (s *settings) get() *config { return s.cur.Load() }

// update applies a JSON object over the current configuration: keys it does not name keep
// their values; "fail" replaces the rules (and restarts their call counting), and
// "quota_errors" its rule (null removes it; a new one starts its window afresh).
func (s *settings) update(body []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.get()
	next := &config{
		LatencyMS: old.LatencyMS, RejectMarker: old.RejectMarker, Fail: old.Fail,
		BigQuery: old.BigQuery, Spanner: old.Spanner,
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(body, &keys); err != nil {
		return status.Errorf(codes.InvalidArgument, "config: %v", err)
	}
	if _, named := keys["quota_errors"]; !named {
		next.QuotaErrors = old.QuotaErrors // decoded into a fresh rule only when named
	}
	if err := json.Unmarshal(body, next); err != nil {
		return status.Errorf(codes.InvalidArgument, "config: %v", err)
	}
	if err := next.prepare(); err != nil {
		return err
	}
	s.cur.Store(next)
	return nil
}

// failure returns the error a fail rule imposes on this call of method, or nil.
func (cfg *config) failure(method string) error {
	for _, r := range cfg.Fail {
		if !strings.HasSuffix(method, r.Method) {
			continue
		}
		n := r.seen.Add(1)
		if n >= r.Nth && n < r.Nth+r.Times {
			return status.Errorf(r.code, "null backend: call %d of %s failed on purpose", n, r.Method)
		}
	}
	return nil
}

// marked reports whether b contains the reject marker.
func (cfg *config) marked(b []byte) bool {
	return cfg.marker != nil && bytes.Contains(b, cfg.marker)
}

// wait sleeps for the configured latency (or until the call is cancelled).
func (cfg *config) wait(ctx context.Context) error {
	return sleepUntil(ctx, time.Now().Add(cfg.latency))
}

func sleepUntil(ctx context.Context, due time.Time) error {
	d := time.Until(due)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}
