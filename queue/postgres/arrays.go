package postgres

import "github.com/jackc/pgx/v5/pgtype"

// textArray, int8Array and byteaArray are text[], bigint[] and bytea[]
// parameters that pgx encodes without an allocation per element. pgx
// reads an array parameter element by element through
// pgtype.ArrayGetter.Index, which returns any: a []string's strings, a
// [][]byte's slices and a []int64's values (from 256 up) are each moved to
// the heap there: two allocations a job in a turn of outcomes, about ten
// in an insert. These return a pointer to the element instead, which an
// interface holds as it is, and the pointer's TextValue, Int64Value or
// BytesValue hands pgx the value.
type (
	textArray  []string
	int8Array  []int64
	byteaArray [][]byte
	textElem   string
	int8Elem   int64
	byteaElem  []byte
)

var (
	_ pgtype.ArrayGetter = textArray(nil)
	_ pgtype.ArrayGetter = int8Array(nil)
	_ pgtype.TextValuer  = (*textElem)(nil)
	_ pgtype.Int64Valuer = (*int8Elem)(nil)
	_ pgtype.ArrayGetter = byteaArray(nil)
	_ pgtype.BytesValuer = (*byteaElem)(nil)
)

// dims are the dimensions of a one-dimensional array of n elements, or
// none for a NULL array.
func dims(n int, null bool) []pgtype.ArrayDimension {
	if null {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(n), LowerBound: 1}}
}

func (a textArray) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }
func (a textArray) Index(i int) any                     { return (*textElem)(&a[i]) }
func (a textArray) IndexType() any                      { return (*textElem)(nil) }

func (a int8Array) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }
func (a int8Array) Index(i int) any                     { return (*int8Elem)(&a[i]) }
func (a int8Array) IndexType() any                      { return (*int8Elem)(nil) }

func (a byteaArray) Dimensions() []pgtype.ArrayDimension { return dims(len(a), a == nil) }
func (a byteaArray) Index(i int) any                     { return (*byteaElem)(&a[i]) }
func (a byteaArray) IndexType() any                      { return (*byteaElem)(nil) }

func (e *textElem) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*e), Valid: true}, nil
}

func (e *int8Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}

func (e *byteaElem) BytesValue() ([]byte, error) { return *e, nil }
