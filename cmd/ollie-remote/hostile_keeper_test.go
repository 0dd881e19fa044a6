package main

import (
	"testing"
	"time"
)

// Finding 4 of issue 11: a host exhausting the keeper, through deploy and
// through the 9P proxy (ns/resume) in front of its namespace.

// TestHostileProbeFlood: the deploy probe prints 1 GiB.
func TestHostileProbeFlood(t *testing.T) {
	hl := startHostileLab(t)
	bad, good := hl.bad.Name, hl.good.Name
	hl.script(t, fakeScript{ManifestFlood: 1 << 30, Manifest: hl.manifest})
	d := hl.desk(t)
	d.startBroker()
	d.mustUp(bad, good)
	out, err, took := d.run(60*time.Second, "deploy", bad, good)
	t.Logf("deploy took %v: %v\n%s", took.Round(time.Millisecond), err, out)
	checkDeployRows(t, out, bad, good)
	checkClean(t, "deploy", out)
	d.finish("a probe printing 1 GiB")
}
