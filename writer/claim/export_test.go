package claim

import "time"

// PauseRenewal stops a claim's renewals without releasing it, as a
// paused or partitioned holder's stop.
func (c *Claim) PauseRenewal() {
	close(c.stop)
	<-c.done
}

// RenewNow makes one renewal attempt now, as a resumed holder's next one;
// it returns whether the claim is lost.
func (c *Claim) RenewNow() bool { return c.renewOnce(time.Second) }
