import Foundation
import IAPProtocol
import JSONRPC
import Logging
import PlayDeveloperAPI
import PlaySimulator
import RPCTestSupport
import RPCTransport
import VerificationService

/// The Google Play simulator beside a test suite (`SuiteFixture.start(play: true)`): its JSON-RPC port for the tests
/// (`play.purchase`, `play.getPurchase`, ...) and its HTTP port as Google's token endpoint and Play Developer API, which
/// verification reaches with the service-account key the simulator issues, as a deployment reaches Google.
public struct PlayStand: Sendable {
    public static let packageName = "com.example.game"
    /// The audience of the push subscription's OIDC tokens verification expects (as a deployment's `--play-push-audience`).
    public static let pushAudience = "https://iap.example.com/v1/notifications/googleplay"
    /// The simulator's JSON-RPC client.
    public let client: RPCClient
    public let simulator: PlaySimulator
    let http: Task<Void, any Error>

    /// The simulator's two RSA keys, made once per test process and copied into each suite's directory: making them is
    /// seconds of CPU in a debug build, and every suite on two cores pays for what one pays.
    private static let keys = Task { () throws -> URL in
        let template = FileManager.default.temporaryDirectory.appendingPathComponent("play-keys-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: template, withIntermediateDirectories: true)
        let simulator = try await SuiteFixture.offThePools { try PlaySimulator(directory: template, publicURL: "http://127.0.0.1:9") }
        await simulator.courier.shutdown()
        return template.appendingPathComponent("play-keys")
    }

    /// Starts it; `serve` puts its router on a port of the suite's.
    static func start(
        directory: URL, logger: Logger, serve: (RPCRouter) async throws -> Int, configure verification: inout VerificationConfiguration
    ) async throws -> PlayStand {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try FileManager.default.copyItem(at: try await keys.value, to: directory.appendingPathComponent("play-keys"))
        // The key file names the token endpoint: the HTTP port is chosen first.
        let port = try LoopbackPort.free()
        let simulator = try await SuiteFixture.offThePools { try PlaySimulator(directory: directory, publicURL: "http://127.0.0.1:\(port)") }
        let client = RPCClient(host: "127.0.0.1", port: try await serve(simulator.router()), configuration: .patient)
        let started = AsyncStream<Int>.makeStream()
        let app = PlayDeveloperAPI(simulator: simulator).application(host: "127.0.0.1", port: port, logger: logger) { p in
            started.continuation.yield(p)
        }
        let http = Task {
            defer { started.continuation.finish() }
            try await app.run()
        }
        var ports = started.stream.makeAsyncIterator()
        guard await ports.next() != nil else { throw SuiteFixtureError("the Play simulator's HTTP server did not start (port \(port))") }
        let key = try await client.call(PlayServiceAccountKey.self, EmptyParams())
        var api = PlayDeveloperAPIClient.Configuration()
        api.apiURL = "http://127.0.0.1:\(port)"
        verification.playAPI = PlayDeveloperAPIClient(account: try PlayServiceAccount(keyFileJSON: Data(key.keyFile.utf8)), configuration: api)
        verification.playPackageNames = [packageName]
        verification.playPush = PlayPushTokenVerifier(
            certsURL: "http://127.0.0.1:\(port)/oauth2/v3/certs",
            rules: PlayPushTokenRules(audience: pushAudience, email: simulator.accounts.pushEmail))
        return PlayStand(client: client, simulator: simulator, http: http)
    }

    func stop() async {
        http.cancel()
        await simulator.courier.shutdown()
    }

    /// Buys on Google Play as the account whose appAccountToken is given (the app passes it as obfuscatedAccountId).
    public func buy(
        _ productId: String, accountToken: String?, basePlanId: String? = nil, quantity: Int? = nil, test: Bool? = nil
    ) async throws -> PlayPurchaseState {
        try await client.call(
            PlayPurchaseProduct.self,
            .init(
                packageName: Self.packageName, productId: productId, basePlanId: basePlanId, obfuscatedExternalAccountId: accountToken,
                quantity: quantity, testPurchase: test))
    }

    /// Moves to another subscription on the phone: a new purchase of `productId` linked to the one it replaces (Google's
    /// upgrade or downgrade), made as the account whose appAccountToken is given.
    public func upgrade(
        to productId: String, accountToken: String?, replacing purchaseToken: String, basePlanId: String = "monthly",
        mode: PlayReplacementMode? = nil
    ) async throws -> PlayPurchaseState {
        try await client.call(
            PlayPurchaseProduct.self,
            .init(
                packageName: Self.packageName, productId: productId, basePlanId: basePlanId, obfuscatedExternalAccountId: accountToken,
                linkedPurchaseToken: purchaseToken, replacementMode: mode))
    }

    /// Pushes go to `url` (the edge's Google Play route), with the audience verification expects unless another is given.
    public func pushTo(_ url: String, audience: String = pushAudience, email: String? = nil) async throws {
        _ = try await client.call(PlaySetPushEndpoint.self, .init(url: url, audience: audience, serviceAccountEmail: email))
    }

    /// Pushes every notification due now; answers when each push has its answer.
    public func deliver() async throws -> PlayDeliverNotifications.Result {
        try await client.call(PlayDeliverNotifications.self, EmptyParams())
    }

    /// Pushes until none is left: a push the edge did not answer in time (a machine every test shares) waits for Pub/Sub's
    /// backoff, so the simulator's clock is moved past it (seconds: nothing else on that clock falls due). Answers the
    /// last pass.
    public func deliverAll() async throws -> PlayDeliverNotifications.Result {
        var pass = try await deliver()
        for round in 0..<8 where pass.pending > 0 {
            _ = try await client.call(PlayAdvanceClock.self, .init(seconds: Int64(2) << round))
            pass = try await deliver()
        }
        return pass
    }

    public func purchase(_ token: String) async throws -> PlayPurchaseState {
        try await client.call(PlayGetPurchase.self, .init(purchaseToken: token))
    }
}
