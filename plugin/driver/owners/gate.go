package owners

import (
	"context"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/plugin/driver/events"
	"github.com/efakit/efakit/plugin/driver/metrics"
)

// CheckTimeout bounds one check for another owner of the EFAs: a check
// that cannot answer within it cannot tell (the last decision stands).
const CheckTimeout = 10 * time.Second

// Gate keeps the plugin's decision to stand aside for another owner of
// the EFAs, from its Check. When the Check cannot tell (the API server
// does not answer), the last decision stands, so one failed read never
// puts the plugin beside another owner; before any decision, the plugin
// stands aside and checks again soon. Its lock is never held across the
// Check.
type Gate struct {
	check Check
	opts  GateOptions
	mu    sync.Mutex
	state gateState
}

type gateState struct {
	why      string // why the plugin stands aside, "" when it need not
	checked  bool   // the check answered at least once
	checkErr string // the last failed check, logged when it changes
}

// GateOptions are what a Gate reports to and asks.
type GateOptions struct {
	Metrics *metrics.Metrics
	Events  *events.Recorder
	// AskAfter asks for a check again after d: the Check could not tell
	// before any decision.
	AskAfter func(d time.Duration)
}

// NewGate returns a Gate over check; a nil check never stands aside.
func NewGate(check Check, o GateOptions) *Gate {
	if o.AskAfter == nil {
		o.AskAfter = func(time.Duration) {}
	}
	return &Gate{check: check, opts: o}
}

// Decide runs the Check (API reads: with the periodic rescans, not the
// health checks) and returns why the plugin must publish and prepare
// nothing, "" when it may. A change is logged, counted in
// efakit_plugin_standing_aside and recorded as an Event.
func (g *Gate) Decide(ctx context.Context) string {
	if g.check == nil {
		return ""
	}
	logger := klog.FromContext(ctx)
	// Bounded: the check runs in the scanning loop, which also makes the
	// health checks' scans; an API server that does not answer must not
	// hold them past the kubelet's health timeout.
	cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	v, err := g.check(cctx)
	cancel()
	g.mu.Lock()
	defer g.mu.Unlock()
	st := &g.state
	// A failed check is logged when it starts or its error changes, not
	// at every scan while the API server is away.
	if err != nil && err.Error() != st.checkErr {
		st.checkErr = err.Error()
		if st.checked {
			logger.Error(err, "Checking for another owner of the EFAs failed", "then", "keeping the last decision", "standingAside", st.why != "")
		}
	} else if err == nil && st.checkErr != "" {
		st.checkErr = ""
		logger.Info("Checking for another owner of the EFAs works again")
	}
	if err != nil {
		if st.checked {
			return st.why
		}
		v = Verdict{Key: "api", Reason: "cannot tell yet whether another owner has this node's EFAs: " + err.Error()}
		// Jittered, so that a fleet that started while the API server
		// was away does not ask again in step.
		g.opts.AskAfter(wait.Jitter(5*time.Second, 1))
	} else {
		st.checked = true
	}
	if v.Reason != st.why && v.Reason != "" {
		logger.Error(errors.New(v.Reason), "Standing aside", "then", "publishing and preparing nothing")
		g.opts.Events.Record(corev1.EventTypeWarning, events.ReasonStandingAside, "", "efakit publishes and prepares no EFA on this node: "+v.Reason)
	} else if v.Reason == "" && st.why != "" {
		logger.Info("No other owner of the EFAs any more; publishing", "was", st.why)
		g.opts.Events.Record(corev1.EventTypeNormal, events.ReasonPublishing, "", "efakit publishes this node's EFAs again; it stood aside because "+st.why)
	}
	st.why = v.Reason
	for _, k := range []string{"netns", "device-plugin", "dra-driver", "api"} {
		val := 0.0
		if k == v.Key && v.Reason != "" {
			val = 1
		}
		g.opts.Metrics.StandingAside.WithLabelValues(k).Set(val)
	}
	return st.why
}
