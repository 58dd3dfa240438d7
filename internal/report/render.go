package report

import (
	"bufio"
	"math"
	"strconv"
	"unicode/utf8"
)

// renderer writes markup to a buffered writer; write errors are sticky in
// the bufio.Writer and reported by Flush.
type renderer struct {
	w      *bufio.Writer
	num    []byte
	colors map[string]int // series name → palette slot, given where the name first appears on the page
	held   map[int]bool   // slots some name holds
	charts int            // charts rendered so far: makes element ids unique in the page
}

func newRenderer(w *bufio.Writer) *renderer {
	return &renderer{w: w, num: make([]byte, 0, 32), colors: map[string]int{}, held: map[int]bool{}}
}

// raw writes trusted markup.
func (r *renderer) raw(ss ...string) {
	for _, s := range ss {
		r.w.WriteString(s)
	}
}

// text writes s escaped for HTML text and double- or single-quoted
// attribute values. Invalid UTF-8 and NUL become U+FFFD.
func (r *renderer) text(s string) {
	last := 0
	for i := 0; i < len(s); {
		c := s[i]
		var rep string
		size := 1
		switch {
		case c == '<':
			rep = "&lt;"
		case c == '>':
			rep = "&gt;"
		case c == '&':
			rep = "&amp;"
		case c == '"':
			rep = "&#34;"
		case c == '\'':
			rep = "&#39;"
		case c == 0:
			rep = "\uFFFD"
		case c >= utf8.RuneSelf:
			rn, n := utf8.DecodeRuneInString(s[i:])
			size = n
			if rn == utf8.RuneError && n == 1 {
				rep = "\uFFFD"
			}
		}
		if rep != "" {
			r.w.WriteString(s[last:i])
			r.w.WriteString(rep)
			last = i + size
		}
		i += size
	}
	r.w.WriteString(s[last:])
}

// px writes a pixel coordinate rounded to 0.1 ("12", "12.3", "-4.5").
// Coordinates are small, so fixed-point integer formatting is exact and
// much faster than strconv's shortest float formatting.
func (r *renderer) px(v float64) {
	if !(math.Abs(v) < 1e15) { // cannot happen for validated input; keep it printable
		r.num = strconv.AppendFloat(r.num[:0], v, 'f', 1, 64)
		r.w.Write(r.num)
		return
	}
	n := int64(math.Round(v * 10))
	b := r.num[:0]
	if n < 0 {
		b = append(b, '-')
		n = -n
	}
	b = strconv.AppendInt(b, n/10, 10)
	if d := n % 10; d != 0 {
		b = append(b, '.', byte('0'+d))
	}
	r.num = b
	r.w.Write(b)
}

// val writes a data value exactly (shortest round-trip form).
func (r *renderer) val(v float64) {
	r.num = strconv.AppendFloat(r.num[:0], v, 'g', -1, 64)
	r.w.Write(r.num)
}

func (r *renderer) int(n int) {
	r.num = strconv.AppendInt(r.num[:0], int64(n), 10)
	r.w.Write(r.num)
}

// palette is Okabe & Ito's colour-blind-friendly set, indexed by Color-1.
var palette = [...]string{
	"#0072B2", // blue
	"#E69F00", // orange
	"#009E73", // bluish green
	"#CC79A7", // reddish purple
	"#56B4E9", // sky blue
	"#D55E00", // vermillion
	"#404040", // dark grey (Okabe & Ito's black, softened)
	"#E2CF2A", // yellow, darkened a little to show on white
}

// autoOrder is the order in which names without a Color take the palette's
// slots: the most distinct on white first, and sky blue (next to blue) and
// yellow (the faintest) last, so that up to six series never pair two
// neighbouring hues but orange and vermillion.
var autoOrder = [...]int{0, 1, 2, 3, 6, 5, 4, 7}

// dashes distinguishes series that share a colour once the palette repeats.
var dashes = [...]string{"", "7 3", "2 3", "9 3 2 3"}

// slots returns the palette slot of each series of a chart: slot k is
// colour palette[k%8] drawn in variant k/8 (solid, then dashed or faded).
//
// A name keeps the slot it got where it first appeared on the page, so
// "accepted" or a strategy has one colour throughout. A series with a Color
// has that one, which no automatic name takes afterwards. A new name takes
// the first, in autoOrder, of the colours that no name on the page holds yet, or, once
// all are held, the lowest one free in this chart. Within one chart slots
// are always distinct: a name whose slot is taken in this chart by another
// series gets the lowest free slot there (for this chart only).
func (r *renderer) slots(c *Chart) []int {
	used := map[int]bool{}
	out := make([]int, len(c.Series))
	// Explicit colours first: they hold their slot for the whole page.
	for _, s := range c.Series {
		if s.Color != AutoColor {
			k := int(s.Color) - 1
			r.held[k] = true
			used[k] = true
		}
	}
	for i, s := range c.Series {
		if s.Color != AutoColor {
			out[i] = int(s.Color) - 1
			continue
		}
		slot, known := r.colors[s.Name]
		if !known || used[slot] {
			slot = -1
			if !known {
				for _, k := range autoOrder {
					if !used[k] && !r.held[k] {
						slot = k
						break
					}
				}
			}
			for k := 0; slot < 0; k++ {
				if !used[k] {
					slot = k
				}
			}
			if !known {
				r.colors[s.Name] = slot
				r.held[slot] = true
			}
		}
		used[slot] = true
		out[i] = slot
	}
	return out
}

// slotStyle returns the colour and the variant (0 for the first round of
// the palette) of a slot.
func slotStyle(slot int) (color string, variant int) {
	return palette[slot%len(palette)], slot / len(palette) % len(dashes)
}
