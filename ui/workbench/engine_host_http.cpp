// The workbench's HTTP server: mosaic-cli serve's HttpServer on the open session's engine.
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <utility>

#include "server/served_models.h"
#include "server/server_metrics.h"
#include "workbench/engine_host.h"
#include "workbench/engine_host_state.h"

namespace mosaic::ui {

QString EngineHost::State::stop_http(double grace_seconds) {
  if (!http) return {};
  http->stop(grace_seconds);  // drains, cancels the rest, writes the request log out
  if (http_thread.joinable()) http_thread.join();
  const QString served = QString::fromStdString(http->metrics().finished_summary());
  const std::int64_t recorded = http->recorded();
  http.reset();  // before its recorder
  http_recorder.reset();
  QString summary = EngineHost::tr("HTTP server stopped: %1").arg(served);
  if (http_run > 0) summary += recorded > 0 ? EngineHost::tr("; %1 recorded as run %2").arg(recorded).arg(http_run)
                                            : EngineHost::tr("; nothing served, so run %1 is recorded as empty").arg(http_run);
  return summary + QStringLiteral(".");
}

void EngineHost::State::follow_runtime() {
  if (!http) return;
  http->set_models(server::served_models(session->family(), session->store(), !http_plain_chat), session->engine().runtime());
}

void EngineHost::startHttpServer(const HttpSettings& settings) {
  post([this, settings] {
    State& st = *state_;
    if (!st.session) return Q_EMIT httpServerFailed(tr("Open a family first."));
    if (st.serving_http()) return Q_EMIT httpServerFailed(tr("The HTTP server is already running; stop it first."));
    if (st.sweeping) return Q_EMIT httpServerFailed(tr("A sweep is serving on this engine; stop it before starting the HTTP server."));
    if (!st.session->planned()) {  // the family has just opened: its layout's plan is on its way
      st.pending_http = settings;
      return;
    }
    try {
      std::vector<server::ServedModel> models = server::served_models(st.session->family(), st.session->store(), !settings.plain_chat);
      QStringList names;
      for (const auto& m : models) names << QString::fromStdString(m.id);
      server::ServerOptions options;
      options.host = settings.host.trimmed().toStdString();
      options.port = settings.port;
      options.api_key = settings.api_key.toStdString();
      options.max_requests = static_cast<std::size_t>(std::max(1, settings.max_requests));
      std::unique_ptr<Recorder> recorder;
      if (!settings.database.isEmpty()) {
        recorder = std::make_unique<Recorder>(settings.database.toStdString());
        recorder->check_writable();
      }
      const auto started = std::chrono::steady_clock::now();
      auto run_id = std::make_shared<std::atomic<std::int64_t>>(0);  // known once bound; requests come after
      auto observer = [this, started, run_id](const RequestRecord& r) {
        ServedPoint p = served_point(r);
        p.strategy = QStringLiteral("serve");
        p.run_id = run_id->load();
        p.finish = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        p.done = static_cast<int>(r.index + 1);
        Q_EMIT servedRequest(p);
      };
      std::vector<std::string> served;  // the family, as a report tells setups apart
      for (const server::ServedModel& m : models) served.push_back(m.id);
      const std::string config =
          nlohmann::json{{"kind", "serve"}, {"source", "workbench"}, {"host", options.host}, {"port", options.port}, {"variants", served}}.dump();
      auto http = std::make_unique<server::HttpServer>(st.session->engine(), std::move(models), options,
                                                       server::ServerRecording{recorder.get(), config, observer});
      const int port = http->bind();
      run_id->store(http->run_id());
      st.http = std::move(http);
      st.http_recorder = std::move(recorder);
      st.http_run = run_id->load();
      st.http_database = settings.database;
      st.http_plain_chat = settings.plain_chat;
      server::HttpServer* server = st.http.get();
      st.http_thread = std::thread([server] { server->run(); });
      const QString url = QStringLiteral("http://%1:%2/v1").arg(settings.host.trimmed()).arg(port);
      Q_EMIT httpServerStarted(url, st.http_run, names);
    } catch (const std::exception& e) {
      Q_EMIT httpServerFailed(QString::fromUtf8(e.what()));
    }
  });
}

void EngineHost::startPendingHttp() {
  if (state_->pending_http) startHttpServer(*std::exchange(state_->pending_http, std::nullopt));
}

void EngineHost::stopHttpServer() {
  post([this] {
    State& st = *state_;
    const bool pending = std::exchange(st.pending_http, std::nullopt).has_value();
    if (!st.serving_http()) {
      if (pending) Q_EMIT httpServerStopped(tr("Not started: it was waiting for the family's layout."), QString());
      return;
    }
    const QString database = st.http_database;
    Q_EMIT httpServerStopped(st.stop_http(2.0), database);
  });
}

}  // namespace mosaic::ui
