package rabbitmq

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// serverCPU is the CPU time the local RabbitMQ (the beam.smp process) has
// run so far, summed over its threads from /proc, and false where there is
// no such process to read (another OS, a remote broker).
func serverCPU() (time.Duration, bool) {
	pid := beamPID()
	if pid == "" {
		return 0, false
	}
	stats, _ := filepath.Glob("/proc/" + pid + "/task/*/schedstat")
	var sum int64
	for _, f := range stats {
		if serverThreads != "" {
			comm, _ := os.ReadFile(filepath.Join(filepath.Dir(f), "comm"))
			if !bytes.Contains(comm, []byte(serverThreads)) {
				continue
			}
		}
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		ns, _, _ := bytes.Cut(b, []byte{' '})
		n, err := strconv.ParseInt(string(ns), 10, 64)
		if err == nil {
			sum += n
		}
	}
	return time.Duration(sum), len(stats) > 0
}

// serverThreads, when set, has serverCPU count only the threads whose name
// contains it (dirty_cpu: the schedulers of long garbage collections).
var serverThreads = os.Getenv("STAGGER_BENCH_SERVER_THREADS")

var beamPIDCache string

func beamPID() string {
	if beamPIDCache != "" {
		if _, err := os.Stat("/proc/" + beamPIDCache); err == nil {
			return beamPIDCache
		}
	}
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, f := range comms {
		if b, err := os.ReadFile(f); err == nil && string(bytes.TrimSpace(b)) == "beam.smp" {
			beamPIDCache = filepath.Base(filepath.Dir(f))
			return beamPIDCache
		}
	}
	return ""
}
