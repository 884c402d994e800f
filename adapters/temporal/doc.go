// Package temporal runs loopchart sessions as Temporal workflows.
package temporal
