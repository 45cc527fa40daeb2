// widget-operator: a controller-runtime operator of Widgets (e2e.opscope.dev/v1), in
// the behaviours of published operator incidents, one per --mode:
//
//	timestamp-loop   writes the time into status.lastReconcileTime on every reconcile, no predicate
//	fixed            GenerationChangedPredicate, a semantic-equality check, observedGeneration
//	stuck-finalizer  adds a finalizer whose cleanup fails on every deletion
//	fixed-requeue    RequeueAfter: 1s, forever
//	failing          returns an error from every reconcile
//	health-check     reads the Widget live and writes status.phase when it differs, every 10 s
//
// --retry immediate retries a failed reconcile after 100 ms every time, where the
// default rate limiter backs off exponentially. `widget-operator webhook` is the
// validating admission webhook of the bad-day scenarios, answering after --delay.
//
// It logs zap JSON to stdout, serves its metrics on --metrics-addr and, when
// OTEL_EXPORTER_OTLP_ENDPOINT is set, traces as opscope's docs/instrumenting.md says.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

var widgetKind = schema.GroupVersionKind{Group: "e2e.opscope.dev", Version: "v1", Kind: "Widget"}

const finalizer = "e2e.opscope.dev/cleanup"

func newWidget() *unstructured.Unstructured {
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(widgetKind)
	return w
}

type widgetReconciler struct {
	client.Client
	live    client.Reader
	mode    string
	phase   string
	timeout time.Duration
}

func (r *widgetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, err error) {
	ctx, span := otel.Tracer("widget-operator").Start(ctx, "reconcile", trace.WithAttributes(
		attribute.String("reconcile.id", string(controller.ReconcileIDFromContext(ctx))),
		attribute.String("k8s.object.group", widgetKind.Group),
		attribute.String("k8s.object.kind", widgetKind.Kind),
		attribute.String("k8s.object.namespace", req.Namespace),
		attribute.String("k8s.object.name", req.Name)))
	defer func() {
		switch {
		case err != nil:
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(attribute.String("reconcile.result", "error"))
		case result.RequeueAfter > 0:
			span.SetAttributes(attribute.String("reconcile.result", "requeue_after"),
				attribute.Float64("reconcile.requeue_after", result.RequeueAfter.Seconds()))
		default:
			span.SetAttributes(attribute.String("reconcile.result", "ok"))
		}
		span.End()
	}()
	log.FromContext(ctx).Info("Reconciling Widget")
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}

	widget := newWidget()
	reader := client.Reader(r.Client)
	if r.mode == "health-check" {
		reader = r.live
	}
	if err := reader.Get(ctx, req.NamespacedName, widget); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	span.SetAttributes(attribute.Int64("k8s.object.generation", widget.GetGeneration()))

	switch r.mode {
	case "timestamp-loop":
		// The incident: the time written on every reconcile is a change of the
		// object, whose watch event starts the next reconcile. (metav1.Now() has
		// second precision, so writes within a second would be no-ops the API
		// server drops; NowMicro, like a time.Now().String(), never repeats.)
		setStatus(widget, "lastReconcileTime", metav1.NowMicro().Format(time.RFC3339Nano))
		setStatus(widget, "phase", r.phase)
		return ctrl.Result{}, r.Status().Update(ctx, widget)
	case "fixed", "health-check":
		desired := map[string]any{"phase": r.phase, "observedGeneration": widget.GetGeneration()}
		current, _, _ := unstructured.NestedMap(widget.Object, "status")
		if equality.Semantic.DeepEqual(map[string]any{
			"phase": current["phase"], "observedGeneration": current["observedGeneration"],
		}, desired) {
			return requeueFor(r.mode), nil
		}
		setStatus(widget, "phase", r.phase)
		setStatus(widget, "observedGeneration", widget.GetGeneration())
		setStatus(widget, "lastReconcileTime", metav1.NowMicro().Format(time.RFC3339Nano))
		if err := r.Status().Update(ctx, widget); err != nil {
			return ctrl.Result{}, err
		}
		return requeueFor(r.mode), nil
	case "stuck-finalizer":
		if widget.GetDeletionTimestamp() != nil {
			return ctrl.Result{}, errors.New("cleanup of the widget's external bucket failed: 403 AccessDenied")
		}
		if controllerutil.AddFinalizer(widget, finalizer) {
			return ctrl.Result{}, r.Update(ctx, widget)
		}
		return ctrl.Result{}, nil
	case "fixed-requeue":
		return ctrl.Result{RequeueAfter: time.Second}, nil
	case "failing":
		return ctrl.Result{}, fmt.Errorf("waiting for ConfigMap %s/%s-settings: %w", req.Namespace, req.Name,
			apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, req.Name+"-settings"))
	}
	return ctrl.Result{}, fmt.Errorf("unknown mode %q", r.mode)
}

func requeueFor(mode string) ctrl.Result {
	if mode == "health-check" {
		return ctrl.Result{RequeueAfter: 10 * time.Second}
	}
	return ctrl.Result{}
}

func setStatus(widget *unstructured.Unstructured, field string, value any) {
	// Only an unserialisable value fails here, and these are strings and integers.
	_ = unstructured.SetNestedField(widget.Object, value, "status", field)
}

func startTracing(ctx context.Context, operator, namespace, pod string) (func(), error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		return func() {}, nil
	}
	exporter, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, err
	}
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter, sdktrace.WithBatchTimeout(time.Second)),
		sdktrace.WithResource(resource.NewSchemaless(
			attribute.String("service.name", operator),
			attribute.String("operator.name", operator),
			attribute.String("k8s.namespace.name", namespace),
			attribute.String("k8s.pod.name", pod))))
	otel.SetTracerProvider(provider)
	return func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = provider.Shutdown(shutdown)
	}, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "webhook" {
		runWebhook(os.Args[2:])
		return
	}
	mode := flag.String("mode", "timestamp-loop", "behaviour (see the package comment)")
	retry := flag.String("retry", "exponential", "after a failed reconcile: exponential (the default rate limiter) or immediate (100 ms)")
	phase := flag.String("phase", "Ready", "the status.phase written")
	metricsAddr := flag.String("metrics-addr", "127.0.0.1:8080", "where /metrics is served")
	operator := flag.String("operator", "widget-operator", "operator.name of the traces")
	namespace := flag.String("pod-namespace", "widget-system", "the namespace this process runs in")
	pod := flag.String("pod-name", "widget-operator-0", "the pod this process runs as")
	watchNamespace := flag.String("watch-namespace", "", "reconcile Widgets of this namespace only")
	timeout := flag.Duration("api-timeout", 0, "time a reconcile's API requests may take (0: no limit)")
	// zap's JSON lines to stdout, as the kubebuilder scaffold's production setting.
	options := zap.Options{DestWriter: os.Stdout}
	options.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&options)))
	setup := ctrl.Log.WithName("setup")

	ctx := ctrl.SetupSignalHandler()
	stopTracing, err := startTracing(ctx, *operator, *namespace, *pod)
	if err != nil {
		setup.Error(err, "starting the OTLP exporter")
		os.Exit(1)
	}
	defer stopTracing()

	config, err := ctrl.GetConfig()
	if err != nil {
		setup.Error(err, "reading the kubeconfig")
		os.Exit(1)
	}
	config.QPS, config.Burst = 1000, 2000
	config.Wrap(func(rt http.RoundTripper) http.RoundTripper { return otelhttp.NewTransport(rt) })

	managerOptions := ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	}
	if *watchNamespace != "" {
		managerOptions.Cache.DefaultNamespaces = map[string]cache.Config{*watchNamespace: {}}
	}
	manager, err := ctrl.NewManager(config, managerOptions)
	if err != nil {
		setup.Error(err, "creating the manager")
		os.Exit(1)
	}

	controllerOptions := controller.Options{}
	if *retry == "immediate" {
		controllerOptions.RateLimiter = workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](
			100*time.Millisecond, 100*time.Millisecond)
	}
	watch := ctrl.NewControllerManagedBy(manager).Named("widget").WithOptions(controllerOptions)
	if *mode == "fixed" {
		watch = watch.For(newWidget(), builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	} else {
		watch = watch.For(newWidget())
	}
	reconciler := &widgetReconciler{Client: manager.GetClient(), live: manager.GetAPIReader(), mode: *mode, phase: *phase, timeout: *timeout}
	if err := watch.Complete(reconciler); err != nil {
		setup.Error(err, "creating the controller")
		os.Exit(1)
	}
	setup.Info("starting", "mode", *mode, "retry", *retry)
	if err := manager.Start(ctx); err != nil {
		setup.Error(err, "running the manager")
		os.Exit(1)
	}
}
