import ArgumentParser
import AsyncHTTPClient
import Foundation
import Hummingbird
import IAPProtocol
import JSONRPC
import Logging
import NIOConcurrencyHelpers
import NIOCore
import RPCTransport

/// The Play simulator beside a running suite (compose/up.sh starts it), for the Google Play scenarios.
struct PlayAddress: ParsableArguments {
    @Option(name: .customLong("play"), help: "play-sim address.") var address = SuiteAddresses.env("IAP_PLAY_ADDR", "127.0.0.1:7106")
    @Option(name: .customLong("package-name"), help: "The Android package of the purchases.") var packageName = "com.example.game"

    func client() throws -> RPCClient { try RPCClient(address: address, configuration: .init(connections: 4, callTimeout: .seconds(60))) }

    /// Buys `count` one-time products on Google Play, purchase i as the account of token i % tokens.count; their tokens.
    func mint(count: Int, productId: String, accountTokens: [String]) async throws -> [String] {
        let play = try client()
        defer { Task { await play.close() } }
        let packageName = packageName
        return try await inParallel(count) { i in
            try await play.call(
                PlayPurchaseProduct.self,
                .init(
                    packageName: packageName, productId: productId, obfuscatedExternalAccountId: accountTokens[i % accountTokens.count],
                    productType: .inapp)
            ).purchaseToken
        }
    }

    /// Points the simulator's pushes at `url` (nil: nowhere, so a run's purchases are not also notified meanwhile; restarting
    /// compose/up.sh points them at the edge again).
    func pushTo(_ url: String?, audience: String? = nil) async throws {
        let play = try client()
        defer { Task { await play.close() } }
        _ = try await play.call(PlaySetPushEndpoint.self, .init(url: url, audience: audience))
        if url == nil {
            FileHandle.standardError.write(Data("the Play simulator's pushes are off for this run (restart compose/up.sh to turn them on)\n".utf8))
        }
    }
}

/// Google Play's real-time developer notifications accepted per second through the edge: the Play simulator's own pushes
/// (each with its OIDC token), captured once by a receiver in this process, then posted to the edge's Google Play route
/// as fast as it answers. Each is verified (the token's signature and claims), recorded in fulfillment's inbox and
/// answered; processing (asking Google) follows off the answer's path.
struct PlayWebhookBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "play-webhook",
        abstract: "Google Play notifications accepted per second through the edge (needs the running suite with play-sim).")
    @Option(help: "The edge's base URL.") var url = "https://localhost:8443"
    @Option(help: "The push audience verification expects (compose/up.sh: the edge's URL of the route).") var audience: String?
    @Option(help: "Pushes to capture before timing (the run stops early if it uses them all).") var notifications = 10_000
    @OptionGroup var suite: SuiteAddresses
    @OptionGroup var play: PlayAddress
    @OptionGroup var http: HTTPLoadOptions
    @OptionGroup var load: LoadOptions

    func run() async throws {
        let runId = String(UUID().uuidString.prefix(8)).lowercased()
        try await suite.silenceSimulatorNotifications()
        let capture = try await PushCapture.start()
        defer { capture.stop() }
        let endpoint = url + "/v1/notifications/googleplay"
        try await play.pushTo(capture.url, audience: audience ?? endpoint)
        FileHandle.standardError.write(Data("buying \(notifications) purchases on Google Play and capturing their pushes...\n".utf8))
        let accounts = try await suite.signInAccounts(run: runId)
        _ = try await play.mint(count: notifications, productId: "coins.100", accountTokens: accounts.map(\.appAccountToken))
        // The simulator pushes each purchase's notification on its own, one after another: wait until they are all captured
        // (or none arrived for ten seconds).
        var (last, quiet) = (-1, 0)
        while capture.count < notifications && quiet < 50 {
            try await Task.sleep(for: .milliseconds(200))  // polling the capture during setup, bounded by the quiet count
            if capture.count == last { quiet += 1 } else { (last, quiet) = (capture.count, 0) }
        }
        try await play.pushTo(nil)
        let pushes = capture.pushes
        let pool = try http.clients(load.connections, perConnection: load.inFlight)
        let driver = LoadDriver(options: load)
        let report = try await driver.run(
            scenario: "Google Play webhook (\(url.hasPrefix("https") ? "HTTPS" : "HTTP")\(http.http1 ? ", HTTP/1.1" : ""), a new purchase each)",
            clients: pool, notes: ["durable": "200 only once the OIDC token verified and the message is recorded in fulfillment's inbox"]
        ) { client, i in
            guard i < pushes.count else { return nil }
            var request = HTTPClientRequest(url: endpoint)
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.headers.add(name: "Authorization", value: pushes[i].authorization)
            request.body = .bytes(pushes[i].body)
            do {
                let response = try await client.execute(request, timeout: .seconds(30))
                _ = try await response.body.collect(upTo: 1 << 20)
                return response.status == .ok ? .ok : .failed(code: Int(response.status.code))
            } catch {
                return .failed(code: CallOutcome.otherError)
            }
        }
        driver.print(report)
        for c in pool { try? await c.shutdown() }
    }
}

/// An HTTP receiver that keeps every push it is sent (its Authorization header and body) and answers 204.
final class PushCapture: Sendable {
    struct Push: Sendable {
        var authorization: String
        var body: ByteBuffer
    }
    private let kept = NIOLockedValueBox<[Push]>([])
    private let server = NIOLockedValueBox<(port: Int, app: Task<Void, any Error>?)>((0, nil))
    var url: String { "http://127.0.0.1:\(server.withLockedValue { $0.port })/push" }
    var count: Int { kept.withLockedValue { $0.count } }
    var pushes: [Push] { kept.withLockedValue { $0 } }

    static func start() async throws -> PushCapture {
        let capture = PushCapture()
        let router = Router()
        router.post("push") { request, _ -> Response in
            let body = try await request.body.collect(upTo: 1 << 20)
            capture.kept.withLockedValue { $0.append(Push(authorization: request.headers[.authorization] ?? "", body: body)) }
            return Response(status: .noContent)
        }
        var quiet = Logger(label: "push-capture")
        quiet.logLevel = .critical
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let application = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0), serverName: "push-capture"),
            onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? 0) }, logger: quiet)
        let app = Task { try await application.run() }
        var iterator = ports.makeAsyncIterator()
        let port = await iterator.next() ?? 0
        capture.server.withLockedValue { $0 = (port, app) }
        return capture
    }

    func stop() { server.withLockedValue { $0.app?.cancel() } }
}
