// Command nullbackend is a benchmark backend for the pyflink-gcp sinks: one process that
// speaks the write path of Pub/Sub, BigQuery (Storage Write gRPC and the REST table lookups),
// Bigtable, Cloud Tasks and Spanner as the sinks' clients call them, acknowledges every call
// after a configurable latency, and counts records per destination.
//
// It is not a test double for correctness (the emulators are the reference for behaviour):
// it exists so that a benchmark measures the sink, not an emulator sharing its cores. Every
// destination exists, nothing is stored, and payloads are only scanned far enough to count
// records and find a reject marker.
//
// Usage:
//
//	nullbackend [-grpc 127.0.0.1:0] [-http 127.0.0.1:0] [-latency 0ms] [-config file.json]
//
// On start it prints one JSON line, {"grpc": port, "http": port}, once both ports listen.
// The HTTP port serves the BigQuery REST calls and the control endpoints: GET /_counts
// (DELETE resets them), GET and PUT /_config (latency_ms, reject_marker, fail rules,
// quota_errors, bigquery_schema, spanner tables), GET /_healthz.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// handler serves every call of one method, unary or streaming alike.
type handler func(s *server, stream grpc.ServerStream) error

type server struct {
	counts   *counts
	settings *settings
	conns    *connCounter
	handlers map[string]handler
	logCalls bool
	seen     map[string]*atomic.Bool
	ids      atomic.Int64 // names of created sessions, streams and tasks; message ids
	streams  *bufferedStreams
}

func (s *server) serve(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	h, ok := s.handlers[method]
	if s.logCalls {
		if first, known := s.seen[method]; !known || !first.Swap(true) {
			log.Printf("call %s (served: %v)", method, ok)
		}
	}
	if !ok {
		s.counts.unimplementedCall(method)
		return status.Errorf(codes.Unimplemented, "null backend: %s is not served", method)
	}
	return h(s, stream)
}

// unary adapts a function of one request to a handler: receive, call, send.
func unary(method string, fn func(s *server, cfg *config, req []byte) ([]byte, error)) handler {
	return func(s *server, stream grpc.ServerStream) error {
		var req frame
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		s.counts.call(method)
		cfg := s.settings.get()
		if err := cfg.wait(stream.Context()); err != nil {
			return err
		}
		if err := cfg.failure(method); err != nil {
			s.counts.failedCall(method)
			return err
		}
		if q := cfg.QuotaErrors; q.failsCall(method) {
			s.counts.failedCall(method)
			return q.status(method).Err()
		}
		resp, err := fn(s, cfg, req.b)
		if err != nil {
			return err
		}
		return stream.SendMsg(&frame{b: resp})
	}
}

// connCounter counts the gRPC port's connections: open now and accepted in all.
type connCounter struct {
	open, accepted atomic.Int64
}

func (c *connCounter) snapshot() map[string]int64 {
	return map[string]int64{"open": c.open.Load(), "accepted": c.accepted.Load()}
}

type countingListener struct {
	net.Listener
	c *connCounter
}

type countedConn struct {
	net.Conn
	c      *connCounter
	closed atomic.Bool
}

func (l countingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.c.open.Add(1)
	l.c.accepted.Add(1)
	return &countedConn{Conn: conn, c: l.c}, nil
}

func (c *countedConn) Close() error {
	if !c.closed.Swap(true) {
		c.c.open.Add(-1)
	}
	return c.Conn.Close()
}

func main() {
	grpcAddr := flag.String("grpc", "127.0.0.1:0", "gRPC listen address (all services)")
	httpAddr := flag.String("http", "127.0.0.1:0", "HTTP listen address (BigQuery REST, control)")
	latency := flag.Duration("latency", 0, "delay before every answer")
	configFile := flag.String("config", "", "JSON configuration (the body PUT /_config takes)")
	logCalls := flag.Bool("log-calls", false, "log the first call of every method")
	flag.Parse()

	cfg := &config{LatencyMS: float64(*latency) / float64(time.Millisecond)}
	if *configFile != "" {
		body, err := os.ReadFile(*configFile)
		if err != nil {
			log.Fatal(err)
		}
		if err := json.Unmarshal(body, cfg); err != nil {
			log.Fatalf("%s: %v", *configFile, err)
		}
	}
	if err := cfg.prepare(); err != nil {
		log.Fatal(err)
	}
	s := &server{
		counts:   newCounts(),
		settings: &settings{},
		conns:    &connCounter{},
		logCalls: *logCalls,
		seen:     map[string]*atomic.Bool{},
		streams:  newBufferedStreams(),
	}
	s.settings.cur.Store(cfg)
	s.handlers = map[string]handler{}
	for _, register := range []func(map[string]handler){
		registerPubSub, registerBigQuery, registerBigtable, registerCloudTasks, registerSpanner,
	} {
		register(s.handlers)
	}
	for method := range s.handlers {
		s.seen[method] = &atomic.Bool{}
	}

	grpcListener, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		log.Fatal(err)
	}
	httpListener, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		log.Fatal(err)
	}
	g := grpc.NewServer(
		grpc.ForceServerCodecV2(rawCodec{}),
		grpc.UnknownServiceHandler(s.serve),
		grpc.MaxRecvMsgSize(256<<20),
		grpc.MaxSendMsgSize(256<<20),
		// The sinks' channels send keepalive pings every 30 s; the default policy (5 min)
		// would answer them with GOAWAY.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: 5 * time.Second, PermitWithoutStream: true,
		}),
	)
	go func() {
		if err := g.Serve(countingListener{Listener: grpcListener, c: s.conns}); err != nil {
			log.Fatal(err)
		}
	}()
	go func() {
		if err := http.Serve(httpListener, s.httpHandler()); err != nil {
			log.Fatal(err)
		}
	}()
	ready, _ := json.Marshal(map[string]int{
		"grpc": grpcListener.Addr().(*net.TCPAddr).Port,
		"http": httpListener.Addr().(*net.TCPAddr).Port,
	})
	fmt.Println(string(ready))

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
	g.Stop()
}
