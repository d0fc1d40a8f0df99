import Foundation
import Hummingbird
import IAPProtocol
import JSONRPC
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Receipts
import ServiceSupport
import VerificationService
import X509

/// Apple's verifyReceipt over HTTP, answered by the simulator: `POST /verifyReceipt` (production) and
/// `POST /sandbox/verifyReceipt`, with Apple's request keys (`receipt-data`, `password`,
/// `exclude-old-transactions`) and statuses: 0, 21002 (unreadable), 21003 (not authentic), 21004 (shared
/// secret mismatch), 21007 (sandbox receipt sent to production), 21008 (production receipt sent to
/// sandbox); and, on request (`sim.setFault`), 21005, HTTP 503 or a slow reply.
public final class VerifyReceiptEndpoint: Sendable {
    private let verifier: VerificationService
    private let sharedSecret: String?
    /// `sim.setFault`'s fault, shared with the App Store Server API endpoint on the same port.
    public let faults: SimHTTPFaults
    /// The simulator's OCSP responder, served at `/ocsp` on the same port.
    let ocsp: SimulatorOCSPResponder

    public init(simulator: AppStoreSimulator, sharedSecret: String?, faults: SimHTTPFaults = SimHTTPFaults()) throws {
        self.faults = faults
        self.ocsp = simulator.ocsp
        var config = VerificationConfiguration()
        config.acceptAnyBundleId = true  // Apple's endpoint answers for every app; the caller checks the bundle id
        config.receiptRoots = [simulator.receiptRoot]
        config.signedPayloadRoots = []
        self.verifier = VerificationService(configuration: config)
        self.sharedSecret = sharedSecret
    }

    public func setFault(_ p: SimSetFault.Params) throws { try faults.set(p) }

    struct AppleRequest: Decodable {
        let receiptData: String
        let password: String?
        enum CodingKeys: String, CodingKey {
            case receiptData = "receipt-data", password
        }
    }

    /// Answers one request's body for the production (`sandbox == false`) or sandbox endpoint:
    /// the HTTP status and the JSON body.
    public func answer(body: [UInt8], sandbox: Bool) async -> (HTTPResponse.Status, [UInt8]) {
        let (mode, delayMs) = faults.take()
        switch mode {
        case .http503: return (.serviceUnavailable, Array("temporarily unavailable".utf8))
        case .http429: return (.tooManyRequests, Array("rate limited".utf8))
        case .status21005: return (.ok, Array(#"{"status":21005,"is-retryable":true}"#.utf8))
        case .slow: try? await Task.sleep(nanoseconds: UInt64(delayMs) * 1_000_000)
        case .none: break
        }
        func status(_ code: Int, environment: String? = nil) -> (HTTPResponse.Status, [UInt8]) {
            let env = environment.map { #","environment":"\#($0)""# } ?? ""
            return (.ok, Array(#"{"status":\#(code)\#(env)}"#.utf8))
        }
        guard let request = try? JSONDecoder().decode(AppleRequest.self, from: Data(body)) else { return status(21002) }
        let environmentName = sandbox ? "Sandbox" : "Production"
        if let secret = sharedSecret, request.password.map({ SecretComparison.equal($0, secret) }) != true {
            return status(21004, environment: environmentName)
        }
        let verified: VerifyReceiptResponse
        do {
            verified = try await verifier.verifyReceipt(.init(receiptData: request.receiptData))
        } catch {
            return status(21002)
        }
        guard verified.status == 0 else { return status(verified.status, environment: environmentName) }
        if !sandbox && verified.environment == "Sandbox" { return status(21007) }
        if sandbox && verified.environment == "Production" { return status(21008) }
        let json = (try? JSONByteEncoder.encode(verified)) ?? Array(#"{"status":21009}"#.utf8)
        return (.ok, json)
    }

    /// A Hummingbird application serving both endpoints on `host:port`, and the App Store Server API with `api`.
    public func application(
        host: String, port: Int, logger: Logger, api: AppStoreServerAPIEndpoint? = nil,
        onRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        let router = Router()
        api?.addRoutes(to: router)
        for (path, sandbox) in [("verifyReceipt", false), ("sandbox/verifyReceipt", true)] {
            router.post(RouterPath(path)) { request, _ -> Response in
                let buffer = try await request.body.collect(upTo: 4 << 20)
                let (status, body) = await self.answer(body: Array(buffer: buffer), sandbox: sandbox)
                return Response(
                    status: status, headers: [.contentType: "application/json"],
                    body: .init(byteBuffer: ByteBuffer(bytes: body)))
            }
        }
        // OCSP (RFC 6960 appendix A.1): a DER request POSTed, a DER response, signed (RSA or ECDSA) on NIO's blocking
        // pool, never on the cooperative threads.
        router.post("ocsp") { request, _ -> Response in
            let bytes = Array(buffer: try await request.body.collect(upTo: 64 * 1024))
            let answer = try await NIOThreadPool.singleton.runIfActive { self.ocsp.respond(to: bytes) }
            return Response(
                status: .ok, headers: [.contentType: "application/ocsp-response"], body: .init(byteBuffer: ByteBuffer(bytes: answer)))
        }
        return Application(
            router: router, configuration: .init(address: .hostname(host, port: port), serverName: "appstore-sim"),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? port) },
            logger: logger)
    }
}

/// A fault `sim.setFault` sets on the simulator's HTTP endpoints (verifyReceipt and the App Store Server
/// API), for a number of requests or until changed.
public final class SimHTTPFaults: Sendable {
    private let fault = NIOLockedValueBox<(mode: SimFaultMode, remaining: Int?, delayMs: Int)>((.none, nil, 0))

    public init() {}

    public func set(_ p: SimSetFault.Params) throws {
        if let count = p.count, count < 0 { throw RPCError.invalidParams("count must not be negative", field: "count", reason: "invalidValue") }
        fault.withLockedValue { $0 = (p.mode, p.count, min(max(p.delayMs ?? 0, 0), 60_000)) }
    }

    /// The fault for this request, consuming one use of a counted fault.
    public func take() -> (SimFaultMode, Int) {
        fault.withLockedValue { f in
            guard f.mode != .none else { return (.none, 0) }
            if let remaining = f.remaining {
                if remaining <= 0 { f = (.none, nil, 0); return (.none, 0) }
                f.remaining = remaining - 1
            }
            return (f.mode, f.delayMs)
        }
    }
}
