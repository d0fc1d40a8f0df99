import AccountsService
import AsyncHTTPClient
import Crypto
import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import Logging
import NIOCore
import NIOSSL
import RPCTestSupport
import RPCTransport
import ServiceSupport
import SuiteTestSupport
import SwiftASN1
import Testing
import X509

@testable import EdgeService

/// The edge over real HTTP in front of the real suite (every service on its own TCP port).
@Suite struct EdgeTests {
    static func serving(_ edge: EdgeService, tls: TLSConfiguration? = nil, _ body: (Int) async throws -> Void) async throws {
        try await EdgeFixture.serving(edge, tls: tls, body)
    }

    static var quiet: Logger { EdgeFixture.quiet }

    /// Runs `body` with the suite and an edge in front of it, on a free port.
    static func withEdge(
        configure: (inout EdgeConfiguration) -> Void = { _ in },
        accounts: (inout AccountsConfiguration) -> Void = { _ in },
        fulfillment: (inout FulfillmentConfiguration) -> Void = { _ in },
        _ body: (SuiteFixture, String) async throws -> Void
    ) async throws {
        try await SuiteFixture.with(configure: fulfillment, accountsConfigure: accounts) { suite in
            var config = EdgeConfiguration()
            config.internalToken = SuiteFixture.internalToken  // the webhook presents it to fulfillment
            // The webhook's effects are asserted right after its answer here; answering once recorded has its own test.
            config.webhookAnswersOnceRecorded = false
            configure(&config)
            let edge = EdgeService(
                accounts: suite.accounts, catalog: suite.catalog, fulfillment: suite.fulfillment, configuration: config,
                logger: quiet)
            try await serving(edge) { port in try await body(suite, "http://127.0.0.1:\(port)") }
        }
    }

    static func post(_ url: String, _ body: String, contentType: String = "application/json", bearer: String? = nil) async throws
        -> (status: Int, body: String, headers: [String: String])
    {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: contentType)
        if let bearer { request.headers.add(name: "Authorization", value: "Bearer \(bearer)") }
        request.body = .bytes(ByteBuffer(string: body))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 8 << 20)
        var headers: [String: String] = [:]
        for h in response.headers { headers[h.name.lowercased()] = h.value }
        return (Int(response.status.code), String(buffer: bytes), headers)
    }

    @Test func paramsAServiceRefusesAreRefusedToTheAppNotCalledAnOutage() async throws {
        try await Self.withEdge { suite, base in
            let ann = try await suite.register("ann")
            let answer = try await Self.post(
                base + "/v1/rpc", #"{"jsonrpc":"2.0","id":1,"method":"fulfillment.getBalance","params":{"environment":"production"}}"#,
                bearer: ann.session)
            #expect(answer.body.contains(#""code":-32602"#) && !answer.body.contains("dependencyUnavailable"), "\(answer.body)")
        }
    }

    @Test func appsReachThePublicMethodsAndNothingElse() async throws {
        try await Self.withEdge { suite, base in
            let url = base + "/v1/rpc"
            let registered = try await Self.post(
                url, #"{"jsonrpc":"2.0","id":1,"method":"accounts.register","params":{"username":"edgy","password":"correct horse battery"}}"#)
            #expect(registered.status == 200)
            let token = try #require(try JSONValue.parse(registered.body)["result"]?["session"]?["token"]?.stringValue)
            // The bearer fills params.session.
            let balance = try await Self.post(url, #"{"jsonrpc":"2.0","id":2,"method":"fulfillment.getBalance"}"#, bearer: token)
            #expect(balance.status == 200 && balance.body.contains(#""balance":0"#), "\(balance.body)")
            // Admin and internal methods do not exist here, with or without a token.
            for method in [
                "catalog.retireProduct", "fulfillment.revokeTransaction", "accounts.findByAppAccountToken",
                "fulfillment.applyNotification", "accounts.authenticate", "verification.verifyReceipt", "sim.purchase",
            ] {
                let answer = try await Self.post(
                    url, #"{"jsonrpc":"2.0","id":3,"method":"\#(method)","params":{"adminToken":"\#(SuiteFixture.adminToken)"}}"#)
                #expect(answer.status == 200 && answer.body.contains(#""code":-32601"#), "\(method): \(answer.body)")
            }
            // A batch, and a batch of notifications only (204, no body).
            let batch = try await Self.post(
                url, #"[{"jsonrpc":"2.0","id":"a","method":"catalog.listProducts"},{"jsonrpc":"2.0","id":"b","method":"no.such"}]"#)
            let replies = try JSONValue.parse(batch.body).arrayValue ?? []
            #expect(replies.count == 2 && replies[0]["result"] != nil && replies[1]["error"]?["code"] == -32601)
            #expect(try await Self.post(url, #"[{"jsonrpc":"2.0","method":"catalog.listProducts"}]"#).status == 204)
            // A service's own errors pass through.
            let stranger = try await Self.post(url, #"{"jsonrpc":"2.0","id":4,"method":"fulfillment.getBalance"}"#, bearer: "not-a-session")
            #expect(stranger.body.contains(#""code":1001"#))
            // Ready: every service answers.
            var ready = HTTPClientRequest(url: base + "/readyz")
            ready.method = .GET
            let readiness = try await HTTPClient.shared.execute(ready, timeout: .seconds(30))
            #expect(readiness.status == .ok)
            #expect(String(buffer: try await readiness.body.collect(upTo: 4096)).contains(#""fulfillment":"ok""#))
            // Not JSON, the wrong type, too large.
            #expect(try await Self.post(url, "{", contentType: "application/json").body.contains(#""code":-32700"#))
            #expect(try await Self.post(url, "{}", contentType: "text/plain").status == 415)
            #expect(try await Self.post(url, String(repeating: " ", count: 3 << 20)).status == 413)
        }
    }

    @Test func eachAddressGetsABucketAndThenRetryAfter() async throws {
        try await Self.withEdge(configure: {
            $0.burst = 5; $0.requestsPerSecond = 0.01
        }) { _, base in
            for _ in 0..<5 {
                #expect(try await Self.post(base + "/v1/rpc", #"{"jsonrpc":"2.0","id":1,"method":"catalog.listProducts"}"#).status == 200)
            }
            let limited = try await Self.post(base + "/v1/rpc", #"{"jsonrpc":"2.0","id":1,"method":"catalog.listProducts"}"#)
            #expect(limited.status == 429)
            #expect(Int(limited.headers["retry-after"] ?? "") ?? 0 >= 1)
        }
        // A batch pays for each of its members: one HTTP request cannot buy 64 calls for one token.
        try await Self.withEdge(configure: {
            $0.burst = 5; $0.requestsPerSecond = 0.01
        }) { _, base in
            let six = "[" + (1...6).map { #"{"jsonrpc":"2.0","id":\#($0),"method":"catalog.listProducts"}"# }.joined(separator: ",") + "]"
            let refused = try await Self.post(base + "/v1/rpc", six)
            #expect(refused.status == 429 && refused.body.isEmpty)
            let three = "[" + (1...3).map { #"{"jsonrpc":"2.0","id":\#($0),"method":"catalog.listProducts"}"# }.joined(separator: ",") + "]"
            #expect(try await Self.post(base + "/v1/rpc", three).status == 200)
            #expect(try await Self.post(base + "/v1/rpc", three).status == 429, "3 + 3 > 5")
        }
    }

    /// A flood of distinct addresses keeps the buckets bounded, and an address at its limit stays limited.
    @Test func tokenBucketsStayBoundedUnderAFloodOfAddresses() {
        let buckets = TokenBuckets(burst: 2, perSecond: 0.001, maxAddresses: 100, now: { 1_000 })
        #expect(buckets.take("victim-of-itself") == nil)
        #expect(buckets.take("victim-of-itself") == nil)
        #expect(buckets.take("victim-of-itself") != nil)
        for i in 0..<10_000 {
            _ = buckets.take("198.51.\(i / 256).\(i % 256)")
            _ = buckets.take("198.51.\(i / 256).\(i % 256)")
        }
        #expect(buckets.count <= 100)
    }

    @Test func applesWebhookIsAnswered200OnlyForWhatFulfillmentTook() async throws {
        try await Self.withEdge { suite, base in
            let alice = try await suite.register("alice")
            let bought = try await suite.buy("alice@icloud", "coins.100")
            _ = try await suite.redeem(alice.session, signed: [bought.signedTransaction])
            let refund = try await suite.simulator.call(SimRefund.self, .init(appleId: "alice@icloud", transactionId: bought.transactionId))
            let payload = try #require(refund.signedPayload)
            let taken = try await Self.post(base + "/v1/notifications/appstore", #"{"signedPayload":"\#(payload)"}"#)
            #expect(taken.status == 200)
            #expect(try await suite.balance(alice.session) == 0)
            // A forgery (tampered payload) is 400, and changes nothing.
            let forged = try await Self.post(base + "/v1/notifications/appstore/sandbox", #"{"signedPayload":"\#(payload.dropLast(4))AAAA"}"#)
            #expect(forged.status == 400)
            #expect(try await Self.post(base + "/v1/notifications/appstore", "not json").status == 400)
        }
    }

    /// Services that cannot be reached: the webhook answers 503 (Apple retries) and JSON-RPC answers
    /// 1020 `unavailable` inside a 200, never an HTTP 500.
    @Test func aDependencyThatIsDownIsUnavailableNotAServerError() async throws {
        func dead() throws -> RPCClient { try RPCClient(address: "127.0.0.1:1", configuration: .init(connections: 1, callTimeout: .seconds(5))) }
        let edge = EdgeService(
            accounts: try dead(), catalog: try dead(), fulfillment: try dead(), configuration: EdgeConfiguration(), logger: Self.quiet)
        try await Self.serving(edge) { port in
            let base = "http://127.0.0.1:\(port)"
            #expect(try await Self.post(base + "/v1/notifications/appstore", #"{"signedPayload":"a.b.c"}"#).status == 503)
            let rpc = try await Self.post(base + "/v1/rpc", #"{"jsonrpc":"2.0","id":1,"method":"catalog.listProducts"}"#)
            #expect(rpc.status == 200)
            #expect(rpc.body.contains(#""code":1020"#) && rpc.body.contains(#""retryable":true"#), "\(rpc.body)")
            let readiness = try await HTTPClient.shared.execute(HTTPClientRequest(url: base + "/readyz"), timeout: .seconds(30))
            #expect(readiness.status == .serviceUnavailable)
            #expect(String(buffer: try await readiness.body.collect(upTo: 4096)).contains(#""accounts":"down""#))
        }
        await edge.close()
    }

    /// The suite, an edge in front of it over HTTPS (a certificate made here), and an AsyncHTTPClient that trusts it:
    /// `body` gets the suite, the edge, its port and the client.
    static func withTLSEdge(
        configure: (inout EdgeConfiguration) -> Void = { _ in },
        httpVersion: HTTPClient.Configuration.HTTPVersion = .automatic,
        _ body: (SuiteFixture, EdgeService, Int, HTTPClient) async throws -> Void
    ) async throws {
        let (dir, certPEM, tls) = try localhostCertificate()
        defer { try? FileManager.default.removeItem(at: dir) }
        try await SuiteFixture.with { suite in
            var config = EdgeConfiguration()
            config.internalToken = SuiteFixture.internalToken  // the webhook presents it to fulfillment
            configure(&config)
            let edge = EdgeService(
                accounts: suite.accounts, catalog: suite.catalog, fulfillment: suite.fulfillment, configuration: config, logger: quiet)
            try await serving(edge, tls: tls) { port in
                var clientTLS = TLSConfiguration.makeClientConfiguration()
                clientTLS.trustRoots = .certificates([try NIOSSLCertificate(bytes: Array(certPEM.utf8), format: .pem)])
                var clientConfig = HTTPClient.Configuration(tlsConfiguration: clientTLS)
                clientConfig.httpVersion = httpVersion
                let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: clientConfig)
                defer { _ = client.shutdown() }
                try await body(suite, edge, port, client)
            }
        }
    }

    /// A self-signed certificate for localhost made here, written as PEM files to a new directory (`cert.pem`,
    /// `key.pem`), and the edge's TLS configuration read back from them.
    static func localhostCertificate() throws -> (directory: URL, certificatePEM: String, tls: TLSConfiguration) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("edge-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let key = P256.Signing.PrivateKey()
        let name = try DistinguishedName { CommonName("localhost") }
        let certificate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(key.publicKey), notValidBefore: Date().addingTimeInterval(-3600),
            notValidAfter: Date().addingTimeInterval(3600), issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                SubjectAlternativeNames([.dnsName("localhost")])
                Critical(BasicConstraints.notCertificateAuthority)
            }, issuerPrivateKey: .init(key))
        let certPEM = try certificate.serializeAsPEM().pemString
        try certPEM.write(to: dir.appendingPathComponent("cert.pem"), atomically: true, encoding: .utf8)
        try key.pemRepresentation.write(to: dir.appendingPathComponent("key.pem"), atomically: true, encoding: .utf8)
        let tls = try EdgeService.tlsConfiguration(
            certificateFile: dir.appendingPathComponent("cert.pem").path, keyFile: dir.appendingPathComponent("key.pem").path)
        return (dir, certPEM, tls)
    }

    /// HTTPS from PEM files: a self-signed certificate made here, TLS 1.2+, HTTP/2 negotiated by ALPN, and
    /// the same routes as over plain HTTP.
    @Test func servesHTTPSWithHTTP2FromPEMFiles() async throws {
        try await Self.withTLSEdge { _, _, bound, client in
            var request = HTTPClientRequest(url: "https://localhost:\(bound)/v1/rpc")
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: #"{"jsonrpc":"2.0","id":1,"method":"catalog.listProducts"}"#))
            let response = try await client.execute(request, timeout: .seconds(30))
            let body = String(buffer: try await response.body.collect(upTo: 1 << 20))
            #expect(response.status == .ok && body.contains(#""etag""#), "\(body)")
            #expect(response.version == .http2, "negotiated \(response.version)")
        }
    }

    /// Sign-ins through the edge are limited per app address (the X-Forwarded-For of a trusted proxy here),
    /// not per edge: one address locked out leaves another free; an app cannot smuggle its own token or address.
    @Test func signInLimitsKeyOnTheAppsAddressNotTheEdges() async throws {
        func forwarded(_ params: String, method: String, bearer: String? = nil) throws -> JSONValue {
            let bytes = try EdgeService.forwardedParams(
                Array(params.utf8), method: method, bearer: bearer, clientAddress: "5.6.7.8", internalToken: "real"
            ).get().params
            return try JSONValue.parse(String(decoding: bytes, as: UTF8.self))
        }
        let smuggled = try forwarded(#"{"internalToken":"guess","clientAddress":"1.2.3.4","username":"u"}"#, method: "catalog.listProducts")
        #expect(smuggled == ["username": "u"])
        let login = try forwarded(#"{"internalToken":"guess"}"#, method: "accounts.login")
        #expect(login["internalToken"] == .string("real") && login["clientAddress"] == .string("5.6.7.8"))
        // The bearer fills a missing session and never replaces the app's own; untouched params pass as sent.
        #expect(try forwarded(#"{"a":1}"#, method: "fulfillment.getBalance", bearer: "tok")["session"] == .string("tok"))
        #expect(try forwarded(#"{"session":"mine"}"#, method: "fulfillment.getBalance", bearer: "tok")["session"] == .string("mine"))
        let untouched = Array(#"{ "storefront" : "USA" }"#.utf8)
        #expect(
            try EdgeService.forwardedParams(untouched, method: "catalog.listProducts", bearer: nil, clientAddress: nil, internalToken: nil)
                .get().params == untouched)
        // The session a call carries is its affinity key: the app's own, else the bearer; only in a session token's shape.
        func session(_ params: String, bearer: String?) throws -> String? {
            try EdgeService.forwardedParams(Array(params.utf8), method: "m", bearer: bearer, clientAddress: nil, internalToken: nil)
                .get().session
        }
        let mine = SessionTokens.generate()
        let tok = SessionTokens.generate()
        #expect(try session(#"{"session":"\#(mine)"}"#, bearer: tok) == mine)
        #expect(try session(#"{"a":1}"#, bearer: tok) == tok)
        #expect(try session(#"{"a":1}"#, bearer: nil) == nil)
        #expect(try session(#"{"session":"mine"}"#, bearer: tok) == nil, "a made-up key goes round-robin")
        #expect(try session(#"{"a":1}"#, bearer: "tok") == nil)
        #expect(try session(#"{"session":"\u0041\#(mine.dropFirst(6))"}"#, bearer: nil) == nil, "an escaped form too")
        #expect(try session(#"{"session":7}"#, bearer: tok) == nil)
        #expect(throws: RPCError.self, "two sessions in one call") { try session(#"{"session":"\#(mine)","session":"\#(tok)"}"#, bearer: nil) }
        #expect(throws: RPCError.self) {
            try EdgeService.forwardedParams(Array("[1]".utf8), method: "catalog.listProducts", bearer: nil, clientAddress: nil, internalToken: nil)
                .get()
        }

        try await Self.withEdge(
            configure: {
                $0.internalToken = SuiteFixture.internalToken
                $0.trustedProxies = ["127.0.0.1"]
            },
            // Locked for ten minutes, not one second: a loaded machine must not see the lock end before the 21st try.
            accounts: { $0.throttle.baseLockMs = 600_000 }
        ) { _, base in
            func login(_ user: String, from address: String) async throws -> String {
                var request = HTTPClientRequest(url: base + "/v1/rpc")
                request.method = .POST
                request.headers.add(name: "Content-Type", value: "application/json")
                request.headers.add(name: "X-Forwarded-For", value: address)
                request.body = .bytes(
                    ByteBuffer(
                        string: #"{"jsonrpc":"2.0","id":1,"method":"accounts.login","params":{"username":"\#(user)","password":"wrong password"}}"#))
                let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
                return String(buffer: try await response.body.collect(upTo: 1 << 20))
            }
            // 20 failures (accounts' per-address limit) from one app address, each on another username.
            for i in 0..<20 {
                let answer = try await login("user\(i)", from: "198.51.100.7")
                #expect(answer.contains(#""code":1001"#))
            }
            let limited = try await login("user20", from: "198.51.100.7")
            #expect(limited.contains(#""code":1006"#), "that address is now limited")
            let other = try await login("user21", from: "198.51.100.8")
            #expect(other.contains(#""code":1001"#), "another app is not")
        }
    }
}
