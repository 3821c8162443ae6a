package main

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// quotaRule answers a share of the write calls with RESOURCE_EXHAUSTED for a while, as a
// service whose quota ran out does: {"rate": 0.3, "duration_s": 20} fails 30% of the write
// calls (Publish, AppendRows requests, MutateRows, CreateTask, Commit) for 20 s, counted from
// the first write call after the rule was set, so a job's start-up does not use up the window.
// The share is exact and spread evenly, starting with each method's first call in the window
// (per method, a call fails each time the running sum of the rate, begun at 1 - rate, reaches a
// whole number: with 0.3 the 1st, 5th, 8th, 11th... call), so a sink that makes few calls in
// the window, or starts writing late in it, still meets its errors, every time.
//
// AppendRows requests are answered with the status in the response (the stream stays open);
// MutateRows fails whole, or with "per_entry" each entry independently at the rate; the
// unary calls end with the status. With "retry_delay_ms" the status carries a
// google.rpc.RetryInfo asking for that delay. "methods" (suffixes of full method names)
// narrows the calls it applies to.
type quotaRule struct {
	Rate         float64  `json:"rate"`
	DurationS    float64  `json:"duration_s"`
	RetryDelayMS float64  `json:"retry_delay_ms"`
	PerEntry     bool     `json:"per_entry"`
	Methods      []string `json:"methods"`

	start    atomic.Int64 // unix nanoseconds of the first write call; 0 before it
	after    atomic.Int64 // write calls received after the window ended
	mu       sync.Mutex
	credit   map[string]float64 // per method: the rate summed over its calls in the window
	injected map[string]int64   // quota errors per method (entries for per-entry MutateRows)
}

// writeMethods are the calls that carry records, one per service.
var writeMethods = []string{
	pubsubService + "Publish",
	bqService + "AppendRows",
	bigtableService + "MutateRows",
	tasksService + "CreateTask",
	spannerService + "Commit",
}

func (q *quotaRule) applies(method string) bool {
	if q == nil || q.Rate <= 0 {
		return false
	}
	names := q.Methods
	if len(names) == 0 {
		names = writeMethods
	}
	for _, m := range names {
		if strings.HasSuffix(method, m) {
			return true
		}
	}
	return false
}

// window reports whether a call of method falls in the rule's window, starting the window at
// the first write call; calls after it are counted.
func (q *quotaRule) window(method string) bool {
	if !q.applies(method) {
		return false
	}
	now := time.Now().UnixNano()
	q.start.CompareAndSwap(0, now)
	if float64(now-q.start.Load()) < q.DurationS*1e9 {
		return true
	}
	q.after.Add(1)
	return false
}

// perEntry reports whether method's quota errors are decided per MutateRows entry.
func (q *quotaRule) perEntry(method string) bool {
	return q != nil && q.PerEntry && strings.HasSuffix(method, "/MutateRows")
}

// draw decides one call (or entry) in the window: true at the rule's rate, counted.
func (q *quotaRule) draw(method string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.injected == nil {
		q.injected = map[string]int64{}
		q.credit = map[string]float64{}
	}
	previous, seen := q.credit[method]
	if !seen {
		previous = 1 - q.Rate // the method's first call in the window fails
	}
	credit := previous + q.Rate
	hit := credit >= 1-1e-9
	if hit {
		credit--
		q.injected[method]++
	}
	q.credit[method] = credit
	return hit
}

// failsCall decides a whole call: whether it is answered with a quota error.
func (q *quotaRule) failsCall(method string) bool {
	return !q.perEntry(method) && q.window(method) && q.draw(method)
}

// status is the quota error, with its RetryInfo when the rule asks for a delay.
func (q *quotaRule) status(method string) *status.Status {
	st := status.New(codes.ResourceExhausted,
		"null backend: quota exceeded (injected) for "+method[strings.LastIndex(method, "/")+1:])
	if q.RetryDelayMS > 0 {
		delay := time.Duration(q.RetryDelayMS * float64(time.Millisecond))
		if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}); err == nil {
			st = withInfo
		}
	}
	return st
}

// encodedStatus is the quota error as an encoded google.rpc.Status, for a response field.
func (q *quotaRule) encodedStatus(method string) []byte {
	b, err := proto.Marshal(q.status(method).Proto())
	if err != nil {
		return nil
	}
	return b
}

// snapshot is the "quota" part of GET /_counts.
func (q *quotaRule) snapshot() map[string]any {
	if q == nil {
		return map[string]any{"window": "none"}
	}
	phase := "pending"
	if start := q.start.Load(); start != 0 {
		phase = "active"
		if float64(time.Now().UnixNano()-start) >= q.DurationS*1e9 {
			phase = "over"
		}
	}
	q.mu.Lock()
	injected := make(map[string]int64, len(q.injected))
	for k, v := range q.injected {
		injected[k] = v
	}
	q.mu.Unlock()
	return map[string]any{
		"window":             phase,
		"injected":           injected,
		"calls_after_window": q.after.Load(),
	}
}
