package retrydriver

import (
	"math/rand/v2"
	"sync/atomic"
)

// NewID returns a new ID for a unit of work (Delivery.ID) that a driver
// starts without one: 16 random hex digits, unique but not secret. IDs are
// cut from a block of idsPerBlock made at once, so making one costs no
// allocation but for every idsPerBlock-th.
func NewID() string {
	for {
		b := idBlocks.Load()
		if b != nil {
			if i := int(b.next.Add(1)) - 1; i < idsPerBlock {
				return b.s[16*i : 16*i+16]
			}
		}
		idBlocks.CompareAndSwap(b, newIDBlock())
	}
}

// idBlock is a string of idsPerBlock IDs of 16 random hex digits each;
// next is the index of the next one to hand out.
type idBlock struct {
	s    string
	next atomic.Int32
}

// idsPerBlock is small: an ID a caller keeps (in a log's buffer, a map)
// keeps its whole block, 16·idsPerBlock bytes, alive.
const idsPerBlock = 16

var idBlocks atomic.Pointer[idBlock]

func newIDBlock() *idBlock {
	const hex = "0123456789abcdef"
	var b [16 * idsPerBlock]byte
	for i := 0; i < len(b); i += 16 {
		v := rand.Uint64()
		for j := i + 15; j >= i; j-- {
			b[j] = hex[v&15]
			v >>= 4
		}
	}
	return &idBlock{s: string(b[:])}
}
