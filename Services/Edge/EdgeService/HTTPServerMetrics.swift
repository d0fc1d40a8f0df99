import CoreMetrics
import Hummingbird

/// OpenTelemetry's HTTP server metrics for every request the edge answers: `http.server.request.duration`
/// (a timer per method, route and status code) and `http.server.active_requests` (requests in progress).
/// Prometheus shows them as `http_server_request_duration` (a histogram in seconds) and
/// `http_server_active_requests`.
struct HTTPServerMetrics<Context: RequestContext>: RouterMiddleware {
    let factory: any MetricsFactory
    let active: Meter

    init(factory: any MetricsFactory) {
        self.factory = factory
        self.active = Meter(label: "http.server.active_requests", dimensions: [], factory: factory)
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        active.increment()
        defer { active.decrement() }
        let status: Int
        let response: Response
        do {
            response = try await next(request, context)
            status = Int(response.status.code)
        } catch {
            record(request, context, status: (error as? any HTTPResponseError)?.status.code ?? 500, since: start)
            throw error
        }
        record(request, context, status: status, since: start)
        return response
    }

    private func record(_ request: Request, _ context: Context, status: Int, since start: ContinuousClock.Instant) {
        let elapsed = ContinuousClock.now - start
        let nanoseconds = elapsed.components.seconds * 1_000_000_000 + elapsed.components.attoseconds / 1_000_000_000
        Timer(
            label: "http.server.request.duration",
            dimensions: [
                ("http.request.method", request.method.rawValue), ("http.route", context.endpointPath ?? "_OTHER"),
                ("http.response.status_code", String(status)),
            ], factory: factory
        ).recordNanoseconds(nanoseconds)
    }
}
