package report

import (
	"fmt"
	"math"
)

// validate checks the whole page; the first problem found is returned as an
// error naming where it is (section, chart, series) and the field and rule.
func validate(p *Page) error {
	for si := range p.Sections {
		s := &p.Sections[si]
		where := fmt.Sprintf("section %d %q", si+1, s.Title)
		if t := s.Table; t != nil {
			for ri, row := range t.Rows {
				if len(row) != len(t.Columns) {
					return fmt.Errorf("report: %s: Table.Rows[%d] has %d cells, want %d (one per column)", where, ri, len(row), len(t.Columns))
				}
			}
		}
		for ci := range s.Charts {
			if err := validateChart(&s.Charts[ci]); err != nil {
				return fmt.Errorf("report: %s: chart %d %q: %w", where, ci+1, s.Charts[ci].Title, err)
			}
		}
	}
	return nil
}

// finite reports a non-finite value as an error naming the field.
func finite(field string, v float64) error {
	switch {
	case math.IsNaN(v):
		return fmt.Errorf("%s is NaN: values must be finite", field)
	case math.IsInf(v, 0):
		return fmt.Errorf("%s is %v: values must be finite", field, v)
	}
	return nil
}

func positive(field string, v float64) error {
	if v <= 0 {
		return fmt.Errorf("%s is %v: a log axis needs values > 0", field, v)
	}
	return nil
}

func validateChart(c *Chart) error {
	if c.Kind != Bars && c.Kind != Lines {
		return fmt.Errorf("unknown Kind %d: want Bars (%d) or Lines (%d)", int(c.Kind), int(Bars), int(Lines))
	}
	if err := validateAxes(c); err != nil {
		return err
	}
	if err := validateSeries(c); err != nil {
		return err
	}
	if err := validateShades(c); err != nil {
		return err
	}
	for i, m := range c.Marks {
		if err := checkPoint(c, fmt.Sprintf("Marks[%d] %q", i, m.Label), m.X, m.Y); err != nil {
			return err
		}
	}
	return nil
}

// validateAxes checks the chart's ranges, bar width and log scales.
func validateAxes(c *Chart) error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"XMin", c.XMin}, {"XMax", c.XMax}, {"YMax", c.YMax}, {"BarWidth", c.BarWidth}} {
		if err := finite(f.name, f.v); err != nil {
			return err
		}
	}
	if c.BarWidth < 0 {
		return fmt.Errorf("BarWidth is %v: must be >= 0 (0 = auto)", c.BarWidth)
	}
	if c.YMax < 0 {
		return fmt.Errorf("YMax is %v: must be >= 0 (0 = auto)", c.YMax)
	}
	if c.XMin > c.XMax {
		return fmt.Errorf("XMin %v > XMax %v: want XMin <= XMax (equal = auto)", c.XMin, c.XMax)
	}
	if c.Kind == Bars && (c.LogX || c.LogY) {
		return fmt.Errorf("LogX/LogY are for Lines charts only: stacked bars need linear axes")
	}
	if c.LogX && c.XMin != c.XMax {
		if err := positive("XMin", c.XMin); err != nil {
			return err
		}
	}
	if c.LogY && c.YMax != 0 {
		if err := positive("YMax", c.YMax); err != nil {
			return err
		}
	}
	return nil
}

// validateSeries checks names and colours are distinct, every point is
// drawable, and a bar chart has at most MaxBars bars.
func validateSeries(c *Chart) error {
	seen := make(map[string]int, len(c.Series))
	colored := map[Color]int{}
	bars := 0
	for i := range c.Series {
		s := &c.Series[i]
		if j, dup := seen[s.Name]; dup {
			return fmt.Errorf("series %q appears twice (Series[%d] and Series[%d]): series names must be distinct within a chart", s.Name, j, i)
		}
		seen[s.Name] = i
		if s.Color > Yellow {
			return fmt.Errorf("series %q: Color %d: want AutoColor or one of the palette's colours (Blue … Yellow)", s.Name, s.Color)
		}
		if j, dup := colored[s.Color]; dup && s.Color != AutoColor {
			return fmt.Errorf("series %q: Color %d is also Series[%d]'s: series of one chart need distinct colours", s.Name, s.Color, j)
		}
		colored[s.Color] = i
		for pi, pt := range s.Points {
			// The field name is built only for a bad point: this loop
			// sees every point of the page.
			if !pointOK(c, pt.X, pt.Y) {
				return fmt.Errorf("series %q: %w", s.Name, checkPoint(c, fmt.Sprintf("Points[%d]", pi), pt.X, pt.Y))
			}
		}
		bars += len(s.Points)
	}
	if c.Kind == Bars && bars > MaxBars {
		return fmt.Errorf("%d bars: more than MaxBars (%d); aggregate into wider bars", bars, MaxBars)
	}
	return nil
}

// validateShades checks every shade is a finite range, positive on a log
// X axis.
func validateShades(c *Chart) error {
	for i, sh := range c.Shades {
		field := fmt.Sprintf("Shades[%d] %q", i, sh.Label)
		if err := finite(field+".From", sh.From); err != nil {
			return err
		}
		if err := finite(field+".To", sh.To); err != nil {
			return err
		}
		if sh.From > sh.To {
			return fmt.Errorf("%s: From %v > To %v: want From <= To", field, sh.From, sh.To)
		}
		if c.LogX {
			if err := positive(field+".From", sh.From); err != nil {
				return err
			}
		}
	}
	return nil
}

// pointOK is the fast path of checkPoint.
func pointOK(c *Chart, x, y float64) bool {
	return !math.IsNaN(x) && !math.IsInf(x, 0) && !math.IsNaN(y) && !math.IsInf(y, 0) &&
		(!c.LogX || x > 0) && (!c.LogY || y > 0)
}

func checkPoint(c *Chart, field string, x, y float64) error {
	if err := finite(field+".X", x); err != nil {
		return err
	}
	if err := finite(field+".Y", y); err != nil {
		return err
	}
	if c.LogX {
		if err := positive(field+".X", x); err != nil {
			return err
		}
	}
	if c.LogY {
		if err := positive(field+".Y", y); err != nil {
			return err
		}
	}
	return nil
}
