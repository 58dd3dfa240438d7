module github.com/staggerhq/stagger/bench

go 1.25.0

require (
	github.com/avast/retry-go/v4 v4.7.0
	github.com/avast/retry-go/v5 v5.1.1
	github.com/cenkalti/backoff/v5 v5.0.3
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/hashicorp/go-retryablehttp v0.7.8
	github.com/jackc/pgx/v5 v5.12.0
	github.com/riverqueue/river v0.43.0
	github.com/riverqueue/river/riverdriver/riverpgxv5 v0.43.0
	github.com/riverqueue/river/riverdriver/riversqlite v0.43.0
	github.com/sethvargo/go-retry v0.5.0
	github.com/staggerhq/stagger v0.1.0
	github.com/staggerhq/stagger/grpc v0.1.0
	github.com/staggerhq/stagger/queue/postgres v0.1.0
	github.com/staggerhq/stagger/queue/sqlite v0.1.0
	maragu.dev/goqite v0.4.0
	modernc.org/sqlite v1.59.0
)

require (
	github.com/bits-and-blooms/bitset v1.24.4 // indirect
	github.com/dustin/go-humanize v1.0.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/ncruces/go-strftime v1.0.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	github.com/riverqueue/river/riverdriver v0.43.0 // indirect
	github.com/riverqueue/river/rivershared v0.43.0 // indirect
	github.com/riverqueue/river/rivertype v0.43.0 // indirect
	github.com/tidwall/gjson v1.19.0 // indirect
	github.com/tidwall/match v1.2.0 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260706201446-f0a921348800 // indirect
	google.golang.org/grpc v1.84.0 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
	modernc.org/libc v1.75.7 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
)
