package postgres

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestArraysEncodeWithoutBoxing: textArray, int8Array and byteaArray
// encode to the same bytes as the slices they wrap, in both formats, and
// with a handful of allocations for a turn of 1,000 elements, where the
// plain slices take one an element.
func TestArraysEncodeWithoutBoxing(t *testing.T) {
	const n = 1000
	ids, nows, payloads := make([]string, n), make([]int64, n), make([][]byte, n)
	for i := range n {
		ids[i], nows[i], payloads[i] = fmt.Sprintf("job-%06d", i), 1_800_000_000_000+int64(i), []byte(`{"n":`+fmt.Sprint(i)+`}`)
	}
	payloads[1] = []byte{} // an empty payload, not NULL
	m := pgtype.NewMap()
	for _, c := range []struct {
		name        string
		oid         uint32
		plain, ours any
	}{
		{"text[]", pgtype.TextArrayOID, ids, textArray(ids)},
		{"bigint[]", pgtype.Int8ArrayOID, nows, int8Array(nows)},
		{"bytea[]", pgtype.ByteaArrayOID, payloads, byteaArray(payloads)},
		{"empty text[]", pgtype.TextArrayOID, []string{}, textArray([]string{})},
		{"null text[]", pgtype.TextArrayOID, []string(nil), textArray(nil)},
	} {
		for _, format := range []int16{pgtype.BinaryFormatCode, pgtype.TextFormatCode} {
			want, err := m.Encode(c.oid, format, c.plain, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.Encode(c.oid, format, c.ours, nil)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s, format %d: %q, %v; want %q", c.name, format, got, err, want)
			}
		}
		if c.name != "text[]" && c.name != "bigint[]" && c.name != "bytea[]" {
			continue
		}
		buf := make([]byte, 0, 64<<10)
		allocs := func(v any) float64 {
			return testing.AllocsPerRun(20, func() {
				if _, err := m.Encode(c.oid, pgtype.BinaryFormatCode, v, buf[:0]); err != nil {
					t.Fatal(err)
				}
			})
		}
		plain, ours := allocs(c.plain), allocs(c.ours)
		t.Logf("%s of %d: %.0f allocations, the plain slice %.0f", c.name, n, ours, plain)
		if plain < n || ours > 8 {
			t.Errorf("%s of %d: %.0f allocations (the plain slice %.0f), want a handful", c.name, n, ours, plain)
		}
	}
}
