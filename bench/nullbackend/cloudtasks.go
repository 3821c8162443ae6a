package main

import (
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Cloud Tasks (google.cloud.tasks.v2.CloudTasks): CreateTask, and the GetQueue the sink makes
// before a queue's first task. Every queue exists and is RUNNING. Task names are not
// remembered, so a task id is never answered with ALREADY_EXISTS.
//
// Field numbers: CreateTaskRequest{parent=1, task=2}, Task{name=1, ...},
// GetQueueRequest{name=1}, Queue{name=1, state=5} (RUNNING = 1).
const tasksService = "/google.cloud.tasks.v2.CloudTasks/"

func registerCloudTasks(h map[string]handler) {
	h[tasksService+"CreateTask"] = unary(tasksService+"CreateTask", createTask)
	h[tasksService+"GetQueue"] = unary(tasksService+"GetQueue", getQueue)
}

// createTask counts one task for its queue and answers the task's name; a task with the
// reject marker is refused with INVALID_ARGUMENT.
func createTask(s *server, cfg *config, req []byte) ([]byte, error) {
	var parent, name string
	var task []byte
	err := eachField(req, func(f field) bool {
		switch f.num {
		case 1:
			parent = string(f.bytes)
		case 2:
			task = f.bytes
		}
		return true
	})
	if err == nil {
		name, err = stringField(task, 1)
	}
	if err != nil || parent == "" {
		return nil, status.Error(codes.InvalidArgument, "null backend: CreateTask without a parent")
	}
	if cfg.marked(task) {
		s.counts.refusedRecords("cloudtasks", parent, 1)
		return nil, status.Error(codes.InvalidArgument, "null backend: the task contains the reject marker")
	}
	if name == "" {
		name = parent + "/tasks/" + strconv.FormatInt(s.ids.Add(1), 36)
	}
	s.counts.accepted("cloudtasks", parent, 1)
	return appendString(nil, 1, name), nil
}

func getQueue(_ *server, _ *config, req []byte) ([]byte, error) {
	name, err := stringField(req, 1)
	if err != nil || name == "" {
		return nil, status.Error(codes.InvalidArgument, "null backend: GetQueue without a name")
	}
	return appendVarint(appendString(nil, 1, name), 5, 1), nil
}
