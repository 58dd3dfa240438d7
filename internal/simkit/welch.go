package simkit

import "math"

// Welch is the result of Welch's unequal-variances t-test of two samples
// (Welch 1947): T = (mean₁ − mean₂) / √(s₁²/n₁ + s₂²/n₂) with the
// Welch–Satterthwaite degrees of freedom, and the two-sided P value of T
// under Student's t with DF degrees of freedom.
type Welch struct {
	Mean1, Mean2 float64 // sample means
	SD1, SD2     float64 // sample standard deviations (n − 1)
	T, DF        float64
	// P is the two-sided P value: the chance of a |T| at least this large
	// if both samples came from distributions with the same mean. When
	// both samples are constant, P is 1 if they are equal and 0 if not.
	P float64
}

// WelchTest compares the means of two samples of at least 2 values each;
// it returns P = NaN when either is shorter.
func WelchTest(a, b []float64) Welch {
	w := Welch{P: math.NaN()}
	if len(a) < 2 || len(b) < 2 {
		return w
	}
	m1, v1 := meanVar(a)
	m2, v2 := meanVar(b)
	w.Mean1, w.Mean2, w.SD1, w.SD2 = m1, m2, math.Sqrt(v1), math.Sqrt(v2)
	n1, n2 := float64(len(a)), float64(len(b))
	se2 := v1/n1 + v2/n2
	if se2 == 0 {
		w.P = 0
		if m1 == m2 {
			w.P = 1
		}
		w.T = math.Copysign(math.Inf(1), m1-m2)
		if m1 == m2 {
			w.T = 0
		}
		return w
	}
	w.T = (m1 - m2) / math.Sqrt(se2)
	w.DF = se2 * se2 / ((v1/n1)*(v1/n1)/(n1-1) + (v2/n2)*(v2/n2)/(n2-1))
	// Two-sided P of Student's t: I_{df/(df+t²)}(df/2, 1/2).
	w.P = regIncBeta(w.DF/2, 0.5, w.DF/(w.DF+w.T*w.T))
	return w
}

// meanVar returns the mean and the sample variance (n − 1) of xs.
func meanVar(xs []float64) (mean, variance float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		variance += (x - mean) * (x - mean)
	}
	return mean, variance / float64(len(xs)-1)
}

// regIncBeta is the regularized incomplete beta function I_x(a, b), by
// its continued fraction (Press et al., Numerical Recipes, 3rd ed., §6.4),
// using the symmetry I_x(a, b) = 1 − I_{1−x}(b, a) where the fraction
// converges faster.
func regIncBeta(a, b, x float64) float64 {
	switch {
	case x <= 0:
		return 0
	case x >= 1:
		return 1
	}
	la, _ := math.Lgamma(a + b)
	lb, _ := math.Lgamma(a)
	lc, _ := math.Lgamma(b)
	front := math.Exp(la - lb - lc + a*math.Log(x) + b*math.Log1p(-x))
	if x < (a+1)/(a+b+2) {
		return front * betaCF(a, b, x) / a
	}
	return 1 - front*betaCF(b, a, 1-x)/b
}

// betaCF evaluates the continued fraction of the incomplete beta function
// by the modified Lentz method.
func betaCF(a, b, x float64) float64 {
	const tiny, eps = 1e-300, 1e-14
	qab, qap, qam := a+b, a+1, a-1
	c, d := 1.0, 1-qab*x/qap
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	h := d
	for m := 1; m <= 300; m++ {
		fm := float64(m)
		m2 := 2 * fm
		aa := fm * (b - fm) * x / ((qam + m2) * (a + m2))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		h *= d * c
		aa = -(a + fm) * (qab + fm) * x / ((a + m2) * (qap + m2))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < eps {
			break
		}
	}
	return h
}

// PairedTest is Student's paired t-test (one sample of the differences
// a[i] − b[i]): T = mean / (sd / √n) with n − 1 degrees of freedom, and
// its two-sided P value. Mean1 and Mean2 are the samples' means, SD1 and
// SD2 their standard deviations. When every difference is the same, P is
// 1 if it is 0 and 0 if not. a and b must have the same length, at least
// 2; otherwise P is NaN.
func PairedTest(a, b []float64) Welch {
	w := Welch{P: math.NaN()}
	if len(a) != len(b) || len(a) < 2 {
		return w
	}
	d := make([]float64, len(a))
	for i := range a {
		d[i] = a[i] - b[i]
	}
	m1, v1 := meanVar(a)
	m2, v2 := meanVar(b)
	w.Mean1, w.Mean2, w.SD1, w.SD2 = m1, m2, math.Sqrt(v1), math.Sqrt(v2)
	md, vd := meanVar(d)
	n := float64(len(d))
	w.DF = n - 1
	if vd == 0 {
		w.P, w.T = 0, math.Copysign(math.Inf(1), md)
		if md == 0 {
			w.P, w.T = 1, 0
		}
		return w
	}
	w.T = md / math.Sqrt(vd/n)
	w.P = regIncBeta(w.DF/2, 0.5, w.DF/(w.DF+w.T*w.T))
	return w
}
