package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// httpHandler serves the control endpoints and the BigQuery REST calls the sink makes
// (tables.get, datasets.get, tables.insert; datasets.insert for completeness).
func (s *server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/_healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	mux.HandleFunc("/_counts", func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			snapshot := s.counts.snapshot(s.conns)
			snapshot["quota"] = s.settings.get().QuotaErrors.snapshot()
			writeJSON(w, http.StatusOK, snapshot)
		case http.MethodDelete:
			s.counts.reset()
			writeJSON(w, http.StatusOK, map[string]bool{"reset": true})
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
		}
	})
	mux.HandleFunc("/_config", func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			writeJSON(w, http.StatusOK, s.settings.get())
		case http.MethodPut, http.MethodPost:
			body, err := io.ReadAll(r.Body)
			if err == nil {
				err = s.settings.update(body)
			}
			if err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
				return
			}
			writeJSON(w, http.StatusOK, s.settings.get())
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
		}
	})
	mux.HandleFunc("/", s.bigQueryREST)
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func restError(w http.ResponseWriter, code int, reason, message string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{
		"code": code, "message": message, "status": reason,
		"errors": []map[string]string{{"reason": reason, "message": message}},
	}})
}

// bigQueryREST answers /bigquery/v2/projects/{p}/datasets/{d}[/tables[/{t}]]: every dataset
// and table exists, and every table has the configured schema.
func (s *server) bigQueryREST(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/bigquery/v2")
	parts := strings.Split(strings.Trim(path, "/"), "/")
	call := "REST " + r.Method + " " + restShape(parts)
	cfg := s.settings.get()
	if len(parts) < 4 || parts[0] != "projects" || parts[2] != "datasets" {
		s.counts.unimplementedCall(call)
		restError(w, http.StatusNotFound, "notFound", "null backend: "+r.Method+" "+r.URL.Path+" is not served")
		return
	}
	s.counts.call(call)
	if err := cfg.wait(r.Context()); err != nil {
		restError(w, http.StatusServiceUnavailable, "backendError", err.Error())
		return
	}
	if err := cfg.failure(call); err != nil {
		s.counts.failedCall(call)
		restError(w, http.StatusServiceUnavailable, "backendError", err.Error())
		return
	}
	project, dataset := parts[1], parts[3]
	switch {
	case len(parts) == 4 && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, datasetJSON(project, dataset))
	case len(parts) == 6 && parts[4] == "tables" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, tableJSON(project, dataset, parts[5], cfg.BigQuery))
	case len(parts) == 5 && parts[4] == "tables" && r.Method == http.MethodPost:
		var body struct {
			TableReference struct {
				TableID string `json:"tableId"`
			} `json:"tableReference"`
			Schema json.RawMessage `json:"schema"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.TableReference.TableID == "" {
			restError(w, http.StatusBadRequest, "invalid", "null backend: no tableReference.tableId")
			return
		}
		t := tableJSON(project, dataset, body.TableReference.TableID, cfg.BigQuery)
		if len(body.Schema) > 0 {
			t["schema"] = body.Schema
		}
		writeJSON(w, http.StatusOK, t)
	default:
		s.counts.unimplementedCall(call)
		restError(w, http.StatusNotFound, "notFound", "null backend: "+r.Method+" "+r.URL.Path+" is not served")
	}
}

// restShape names a REST path by its resource kinds (projects/_/datasets/_/tables/_), so
// calls count per kind rather than per table.
func restShape(parts []string) string {
	out := make([]string, len(parts))
	for i, p := range parts {
		if i%2 == 0 {
			out[i] = p
		} else {
			out[i] = "_"
		}
	}
	return strings.Join(out, "/")
}

func datasetJSON(project, dataset string) map[string]any {
	return map[string]any{
		"kind":             "bigquery#dataset",
		"id":               project + ":" + dataset,
		"datasetReference": map[string]string{"projectId": project, "datasetId": dataset},
		"location":         "US",
	}
}

func tableJSON(project, dataset, table string, schema json.RawMessage) map[string]any {
	return map[string]any{
		"kind": "bigquery#table",
		"id":   project + ":" + dataset + "." + table,
		"tableReference": map[string]string{
			"projectId": project, "datasetId": dataset, "tableId": table,
		},
		"schema":   map[string]json.RawMessage{"fields": schema},
		"type":     "TABLE",
		"location": "US",
		"numRows":  "0",
	}
}
