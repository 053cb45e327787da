#pragma once
// Prometheus metrics of a job's processes: the metric model and text format are prometheus-cpp's
// (Debian's prometheus-cpp-dev, core library), served by net::http_server on
// launch.metrics_port (the store's on the port itself, worker process s's on port + s; off when
// 0). Every metric is named paco_store_* or paco_worker_*:
//
//   store   rounds_closed_total{module}         rounds closed (by all pushes or by deadline)
//           round_open_seconds                  histogram: first push to close, per round
//           module_round{module}                each module's round now
//           pushes_total{result}                accepted | late (its round closed without it)
//                                               | refused (bad payload, duplicate, past the end)
//           bytes_total{worker,direction}       payload bytes in (pushes) and out (pulls)
//           live_workers                        workers with a live link
//           worker_loss{worker}, worker_tokens_per_second{worker}   from the workers' reports
//           rounds_planned                      dipaco.rounds: a module's round at the end
//   worker  rounds_total, rounds_planned, round, loss (nats/token), loss_bpb (bits/byte; named
//           so for promtool, which reads a "bits" unit as a non-base one), tokens_per_second
//           (the last round's),
//           tokens_total (trained on: rate() of it is the throughput over any window),
//           inner_step, sync_seconds_total (pushing and waiting), bytes_sent_total,
//           late_pushes_total
//
// Updates come on the store's serving thread or the worker's round loop; scrapes on the HTTP
// server's thread (prometheus-cpp's metrics are atomic).

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <memory>
#include <sstream>
#include <string>

#include "paco/store/module_store.hpp"
#include "paco/store/server.hpp"

namespace paco::job {

// Prometheus's text exposition format, version 0.0.4.
inline constexpr const char* prometheus_content_type = "text/plain; version=0.0.4; charset=utf-8";

// A registry's metrics in the text format.
inline std::string prometheus_text(const prometheus::Registry& r) {
  std::ostringstream o;
  prometheus::TextSerializer().Serialize(o, r.Collect());
  return o.str();
}

class store_metrics {
 public:
  // rounds: dipaco.rounds, the round every module reaches at the end.
  explicit store_metrics(int rounds)
      : reg_(std::make_shared<prometheus::Registry>()),
        rounds_(prometheus::BuildCounter()
                    .Name("paco_store_rounds_closed_total")
                    .Help("Rounds closed, per module")
                    .Register(*reg_)),
        open_s_(prometheus::BuildHistogram()
                    .Name("paco_store_round_open_seconds")
                    .Help("Time from a round's first push to its close")
                    .Register(*reg_)
                    .Add({}, prometheus::Histogram::BucketBoundaries{0.01, 0.05, 0.1, 0.25, 0.5, 1,
                                                                     2.5, 5, 10, 30, 60, 120})),
        module_round_(prometheus::BuildGauge()
                          .Name("paco_store_module_round")
                          .Help("Each module's round")
                          .Register(*reg_)),
        pushes_(prometheus::BuildCounter()
                    .Name("paco_store_pushes_total")
                    .Help("Pushes by result: accepted, merged_late (into a later round, "
                          "discounted), late "
                          "(their round had closed: dropped), refused")
                    .Register(*reg_)),
        bytes_(prometheus::BuildCounter()
                   .Name("paco_store_bytes_total")
                   .Help("Payload bytes per worker: in (pushes), out (pulls)")
                   .Register(*reg_)),
        live_(prometheus::BuildGauge()
                  .Name("paco_store_live_workers")
                  .Help("Workers with a live link")
                  .Register(*reg_)
                  .Add({})),
        loss_(prometheus::BuildGauge()
                  .Name("paco_store_worker_loss")
                  .Help("Each worker's training loss in its last reported round (nats/token)")
                  .Register(*reg_)),
        tps_(prometheus::BuildGauge()
                 .Name("paco_store_worker_tokens_per_second")
                 .Help("Each worker's inner-step throughput in its last reported round")
                 .Register(*reg_)) {
    pushes_.Add({{"result", "accepted"}});
    pushes_.Add({{"result", "late"}});
    pushes_.Add({{"result", "refused"}});
    prometheus::BuildGauge()
        .Name("paco_store_rounds_planned")
        .Help("Rounds of the run (dipaco.rounds): every module's round at its end")
        .Register(*reg_)
        .Add({})
        .Set(double(rounds));
  }

  void on_close(const store::round_summary& r) {
    rounds_.Add({{"module", std::to_string(r.module)}}).Increment();
    open_s_.Observe(r.open_s);
    module_round_.Add({{"module", std::to_string(r.module)}}).Set(double(r.round + 1));
  }
  void on_traffic(const store::traffic& t) {
    using k = store::traffic::kind;
    const std::string w = std::to_string(t.worker);
    switch (t.what) {
      case k::push_accepted:
      case k::push_merged:
      case k::push_late:
      case k::push_refused:
        pushes_
            .Add({{"result", t.what == k::push_accepted ? "accepted"
                             : t.what == k::push_merged ? "merged_late"
                             : t.what == k::push_late   ? "late"
                                                        : "refused"}})
            .Increment();
        bytes_.Add({{"worker", w}, {"direction", "in"}}).Increment(double(t.bytes));
        break;
      case k::pull:
        bytes_.Add({{"worker", w}, {"direction", "out"}}).Increment(double(t.bytes));
        break;
      case k::live: break;
    }
    live_.Set(double(t.live));
  }
  void on_report(const store::worker_report& r) {
    loss_.Add({{"worker", std::to_string(r.worker)}}).Set(r.loss);
    tps_.Add({{"worker", std::to_string(r.worker)}}).Set(r.tokens_per_s);
  }
  std::string text() const { return prometheus_text(*reg_); }

 private:
  std::shared_ptr<prometheus::Registry> reg_;
  prometheus::Family<prometheus::Counter>& rounds_;
  prometheus::Histogram& open_s_;
  prometheus::Family<prometheus::Gauge>& module_round_;
  prometheus::Family<prometheus::Counter>& pushes_;
  prometheus::Family<prometheus::Counter>& bytes_;
  prometheus::Gauge& live_;
  prometheus::Family<prometheus::Gauge>& loss_;
  prometheus::Family<prometheus::Gauge>& tps_;
};

// One completed round of a worker, as its metrics take it.
struct worker_round_figures {
  long round = 0;
  double loss = 0;             // nats per token
  double seconds = 0;          // the round's wall time
  double sync_s = 0;           // of which pushing and waiting
  double tokens = 0;           // tokens its inner steps trained on
  long inner_step = 0;         // after the round
  std::size_t bytes_sent = 0;  // in all, as its log records
  long late = 0;               // its pushes dropped late, in all
};

class worker_metrics {
 public:
  // rounds: dipaco.rounds, the rounds this worker completes in all.
  explicit worker_metrics(int rounds)
      : reg_(std::make_shared<prometheus::Registry>()),
        rounds_(counter("paco_worker_rounds_total", "Rounds completed")),
        round_(gauge("paco_worker_round", "The last round completed")),
        loss_(gauge("paco_worker_loss", "Training loss of the last round (nats/token)")),
        bpb_(gauge("paco_worker_loss_bpb", "Training loss of the last round (bits/byte)")),
        tps_(gauge("paco_worker_tokens_per_second", "Tokens per second of the last round")),
        tokens_(counter("paco_worker_tokens_total", "Tokens trained on")),
        step_(gauge("paco_worker_inner_step", "Inner steps taken")),
        sync_(counter("paco_worker_sync_seconds_total", "Seconds spent pushing and waiting")),
        bytes_(counter("paco_worker_bytes_sent_total", "Bytes sent to the store")),
        late_(counter("paco_worker_late_pushes_total", "Pushes dropped: their round had closed")) {
    gauge("paco_worker_rounds_planned", "Rounds of the run (dipaco.rounds)").Set(double(rounds));
  }

  void on_round(const worker_round_figures& f) {
    rounds_.Increment();
    round_.Set(double(f.round));
    loss_.Set(f.loss);
    bpb_.Set(f.loss / 0.6931471805599453);
    const double train_s = f.seconds - f.sync_s;
    tps_.Set(train_s > 0 ? f.tokens / train_s : 0);
    tokens_.Increment(std::max(0.0, f.tokens));
    step_.Set(double(f.inner_step));
    sync_.Increment(std::max(0.0, f.sync_s));
    if (double(f.bytes_sent) > bytes_.Value())
      bytes_.Increment(double(f.bytes_sent) - bytes_.Value());
    if (double(f.late) > late_.Value()) late_.Increment(double(f.late) - late_.Value());
  }
  std::string text() const { return prometheus_text(*reg_); }

 private:
  prometheus::Counter& counter(const char* name, const char* help) {
    return prometheus::BuildCounter().Name(name).Help(help).Register(*reg_).Add({});
  }
  prometheus::Gauge& gauge(const char* name, const char* help) {
    return prometheus::BuildGauge().Name(name).Help(help).Register(*reg_).Add({});
  }
  std::shared_ptr<prometheus::Registry> reg_;
  prometheus::Counter& rounds_;
  prometheus::Gauge &round_, &loss_, &bpb_, &tps_;
  prometheus::Counter& tokens_;
  prometheus::Gauge& step_;
  prometheus::Counter &sync_, &bytes_, &late_;
};

}  // namespace paco::job
