// Package sim is a discrete-event simulator of retry storms in virtual time.
package sim
