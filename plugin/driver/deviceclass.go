package driver

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/efakit/efakit/plugin/driver/resources"
)

// checkExtendedResource reads, once at start, the single-EFA DeviceClass
// the chart made and says whether pods that ask for its extended resource
// (vpc.amazonaws.com/efa) are served: the API server drops the class's
// extendedResourceName where DRAExtendedResource is off (alpha, off by
// default, in 1.34 and 1.35), and nothing else would tell the operator
// why such pods stay Pending. It only logs: the plugin serves claims
// either way.
func checkExtendedResource(ctx context.Context, kube kubernetes.Interface, class resources.ClassOptions) {
	if kube == nil || class.ExtendedResourceName == "" {
		return
	}
	name := class.ClassName
	if name == "" {
		name = resources.DefaultDeviceClass
	}
	logger := klog.FromContext(ctx).WithValues("deviceClass", name, "extendedResourceName", class.ExtendedResourceName)
	var got *string
	err := retryRead(ctx, func(ctx context.Context) error {
		dc, err := kube.ResourceV1().DeviceClasses().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			got = dc.Spec.ExtendedResourceName
		}
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		logger.Error(err, "Extended resource not served", "why", "the DeviceClass does not exist", "then", "pods that ask for the extended resource stay Pending; create the class (the chart's deviceClasses.create) or use ResourceClaims")
	case err != nil:
		logger.Error(err, "Reading the DeviceClass failed", "then", "cannot tell whether pods that ask for the extended resource are served")
	case got == nil:
		logger.Error(errors.New("the API server dropped spec.extendedResourceName"), "Extended resource not served",
			"why", "DRAExtendedResource is off on the API server (alpha and off by default in Kubernetes 1.34 and 1.35, on by default from 1.36)",
			"then", "pods that ask for the extended resource stay Pending; give them ResourceClaims, or turn the feature on in the API server, scheduler and kubelet")
	case *got != class.ExtendedResourceName:
		logger.Error(errors.New("another extendedResourceName"), "Extended resource not served", "classHas", *got,
			"then", "pods that ask for "+class.ExtendedResourceName+" are not served by this class")
	default:
		logger.Info("Pods that ask for the extended resource get EFAs through DRA")
	}
}

// retryRead runs read up to three times, a second apart, each bounded to
// 5 s (the API server may still be starting beside the plugin), until it
// answers, or says the class is not there or not the plugin's to read.
// It is wait's backoff, not client-go's util/retry: retry.OnError takes
// no context, so a plugin stopped during the retries would wait them out.
func retryRead(ctx context.Context, read func(context.Context) error) error {
	var err error
	_ = wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Steps: 3, Duration: time.Second, Factor: 1}, func(ctx context.Context) (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err = read(rctx)
		return err == nil || apierrors.IsNotFound(err) || apierrors.IsForbidden(err), nil
	})
	return err
}
