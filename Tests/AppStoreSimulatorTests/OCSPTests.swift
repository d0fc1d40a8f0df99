import AppStoreSimulator
import Crypto
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import NIOConcurrencyHelpers
import RPCTestSupport
import Receipts
import ServiceSupport
import SwiftASN1
import Testing
import VerificationService
import X509

/// Online revocation checks (OCSP) over real HTTP against the simulator's responder: good, revoked, an
/// unreachable or silent responder (soft- and hard-fail), and answers cached until their `nextUpdate`.
@Suite struct OCSPTests {
    /// A simulator whose new PKI names its own `/ocsp` on `port` (or `responder`), serving HTTP on `port`.
    final class Fixture: Sendable {
        let simulator: AppStoreSimulator
        let directory: URL
        /// The simulator's clock, which the test's checkers share (both move together when a test advances it).
        let time = ManualClock(startMs: Int64(Date().timeIntervalSince1970 * 1000))
        private let app: Task<Void, any Error>

        init(responder: String? = nil) async throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("ocsp-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let port = try LoopbackPort.free()
            let dir = directory
            let clock = time.clock
            simulator = try await Task.detached {
                try AppStoreSimulator(directory: dir, clock: clock, ocspURL: responder ?? "http://127.0.0.1:\(port)/ocsp")
            }.value
            var quiet = Logger(label: "sim-http")
            quiet.logLevel = .critical
            let (ports, continuation) = AsyncStream<Int>.makeStream()
            let application = try VerifyReceiptEndpoint(simulator: simulator, sharedSecret: nil).application(
                host: "127.0.0.1", port: port, logger: quiet
            ) { port in continuation.yield(port) }
            // The stream ends if the server stops (a port it could not bind): then this fails instead of waiting.
            app = Task {
                defer { continuation.finish() }
                try await application.run()
            }
            var iterator = ports.makeAsyncIterator()
            guard await iterator.next() != nil else { throw ServerDidNotStart(port: port) }
        }

        deinit { app.cancel() }

        struct ServerDidNotStart: Error { let port: Int }

        func verification(_ checker: RevocationChecker) throws -> VerificationService {
            var config = VerificationConfiguration()
            config.bundleIds = ["com.example.game"]
            config.extraRoots = try TrustAnchors.load(TrustAnchors.rootFiles(in: directory.appendingPathComponent("sim-pki").path))
            config.revocation = checker
            return VerificationService(configuration: config)
        }

        func buy(_ productId: String = "coins.100") throws -> SimPurchase.Result {
            try simulator.purchase(.init(appleId: "a@x", bundleId: "com.example.game", productId: productId, productType: .consumable))
        }
    }

    /// A checker whose view of now is `time` (the fixture's simulator clock), so answers expire when the test says.
    /// The default timeout is patient: the responder signs on NIO's shared blocking pool, which other suites of this
    /// process keep busy (password hashing) when every suite runs at once; only the timeout tests pass a short one.
    static func checker(
        hardFail: Bool = false, timeout: Duration = .seconds(30), time: ManualClock? = nil, warnings: NIOLockedValueBox<[String]> = .init([])
    ) -> RevocationChecker {
        var configuration = RevocationChecker.Configuration()
        configuration.hardFail = hardFail
        configuration.timeout = timeout
        configuration.unreachableBackoff = .zero
        return RevocationChecker(
            configuration: configuration, transport: OCSPHTTPTransport.post, warn: { message in warnings.withLockedValue { $0.append(message) } },
            now: { Date(timeIntervalSince1970: Double((time?.clock ?? .system).nowMs) / 1000) })
    }

    @Test func goodCertificatesPassAndTheAnswersAreReusedUntilTheirNextUpdate() async throws {
        let fixture = try await Fixture()
        let time = fixture.time
        // Hard-fail: an answer that does not verify (signature, id, validity) would refuse, so passing shows they do.
        let checker = Self.checker(hardFail: true, time: time)
        let verification = try fixture.verification(checker)
        let bought = try fixture.buy()

        // Leaf and intermediate of each chain: one question each to the responder.
        #expect(try await verification.verifyTransaction(.init(signedTransaction: bought.signedTransaction)).status == 0)
        #expect(checker.responderQueries == 2 && fixture.simulator.ocsp.requestCount == 2)
        #expect(try await verification.verifyReceipt(.init(receiptData: bought.receiptData)).status == 0)
        #expect(checker.responderQueries == 4 && fixture.simulator.ocsp.requestCount == 4)

        // Within the answers' validity (an hour): no new questions, however many verifications.
        for _ in 0..<20 {
            let again = try fixture.buy()
            #expect(try await verification.verifyTransaction(.init(signedTransaction: again.signedTransaction)).status == 0)
            #expect(try await verification.verifyReceipt(.init(receiptData: again.receiptData)).status == 0)
        }
        time.advance(ms: 3_000_000)
        #expect(try await verification.verifyTransaction(.init(signedTransaction: bought.signedTransaction)).status == 0)
        #expect(fixture.simulator.ocsp.requestCount == 4)

        // Past nextUpdate the chain is checked again: two new questions for the JWS chain.
        time.advance(ms: 700_000)
        #expect(try await verification.verifyTransaction(.init(signedTransaction: bought.signedTransaction)).status == 0)
        #expect(checker.responderQueries == 6 && fixture.simulator.ocsp.requestCount == 6)
    }

    /// The inline path (what the server answers on its event loop) has an answer only while a chain's verdict is
    /// in memory and fresh: none on first sight and none once a recheck is due, so OCSP is never skipped by it;
    /// when it answers, it agrees with the full path.
    @Test func theInlinePathAnswersOnlyWhileAChainsVerdictIsFresh() async throws {
        let fixture = try await Fixture()
        let checker = Self.checker(hardFail: true, time: fixture.time)
        let verification = try fixture.verification(checker)
        let bought = try fixture.buy()
        let transaction = VerificationVerifyTransaction.Params(signedTransaction: bought.signedTransaction)
        let receipt = VerificationVerifyReceipt.Params(receiptData: bought.receiptData)
        #expect(verification.verifyTransactionFromMemory(transaction) == nil)
        #expect(verification.verifyReceiptFromMemory(receipt) == nil)

        let full = try await verification.verifyTransaction(transaction)
        #expect(full.status == 0)
        #expect(try await verification.verifyReceipt(receipt).status == 0)
        let queries = checker.responderQueries
        let inline = try #require(verification.verifyTransactionFromMemory(transaction))
        #expect(inline.status == 0 && inline.transaction == full.transaction && inline.environment == full.environment)
        #expect(verification.verifyReceiptFromMemory(receipt)?.status == 0)
        // A tampered payload under a known chain is refused inline too.
        var parts = bought.signedTransaction.split(separator: ".").map(String.init)
        parts[2] = (parts[2].first == "A" ? "B" : "A") + parts[2].dropFirst()
        let forged = VerificationVerifyTransaction.Params(signedTransaction: parts.joined(separator: "."))
        #expect(verification.verifyTransactionFromMemory(forged)?.reason == "signatureInvalid")
        #expect(checker.responderQueries == queries, "the inline path asked no responder")

        // Past the answers' nextUpdate: no inline answer; the full path asks again.
        fixture.time.advance(ms: 3_700_000)
        #expect(verification.verifyTransactionFromMemory(transaction) == nil)
        #expect(verification.verifyReceiptFromMemory(receipt) == nil)
        #expect(try await verification.verifyTransaction(transaction).status == 0)
        #expect(checker.responderQueries > queries)
        #expect(verification.verifyTransactionFromMemory(transaction)?.status == 0)
    }

    @Test func aRevokedIntermediateOrLeafIsRefusedOnceTheCachedGoodAnswerExpires() async throws {
        let fixture = try await Fixture()
        let time = fixture.time
        let checker = Self.checker(time: time)
        let verification = try fixture.verification(checker)
        let bought = try fixture.buy()
        #expect(try await verification.verifyTransaction(.init(signedTransaction: bought.signedTransaction)).status == 0)

        _ = try fixture.simulator.ocsp.revoke("jws-intermediate", nowMs: Int64(Date().timeIntervalSince1970 * 1000))
        _ = try fixture.simulator.ocsp.revoke("receipt-leaf", nowMs: Int64(Date().timeIntervalSince1970 * 1000))
        // A verifier that never asked sees the revocations at once.
        let fresh = try fixture.verification(Self.checker())
        let refused = try await fresh.verifyTransaction(.init(signedTransaction: bought.signedTransaction))
        #expect(refused.status == 21003 && refused.reason == "revoked")
        let refusedReceipt = try await fresh.verifyReceipt(.init(receiptData: bought.receiptData))
        #expect(refusedReceipt.status == 21003 && refusedReceipt.reason == "revoked")
        // The first one holds its good answer until that answer's nextUpdate, then asks and refuses.
        #expect(try await verification.verifyTransaction(.init(signedTransaction: bought.signedTransaction)).status == 0)
        time.advance(ms: 3_700_000)
        let late = try await verification.verifyTransaction(.init(signedTransaction: bought.signedTransaction))
        #expect(late.status == 21003 && late.reason == "revoked")
        // A revoked answer is cached too: refusing again asks nobody.
        let asked = fixture.simulator.ocsp.requestCount
        #expect(try await verification.verifyTransaction(.init(signedTransaction: bought.signedTransaction)).reason == "revoked")
        #expect(fixture.simulator.ocsp.requestCount == asked)
        // Revocations survive a restart of the simulator (kept beside its PKI).
        let restarted = try AppStoreSimulator(directory: fixture.directory, clock: fixture.time.clock)
        let request = try Self.requestBytes(for: "jws-intermediate", in: fixture.directory)
        #expect(OCSPMessages.summary(ofResponse: restarted.ocsp.respond(to: request))?.status == .revoked)
    }

    @Test func anUnreachableResponderIsSoftFailedWithAWarningOrRefusedRetryablyWhenHard() async throws {
        // Certificates naming a responder nobody listens on.
        let fixture = try await Fixture(responder: "http://127.0.0.1:\(try LoopbackPort.free())/ocsp")
        let bought = try fixture.buy()
        let warnings = NIOLockedValueBox<[String]>([])
        // Connection refused: the HTTP client retries connecting until the timeout, so a short one.
        let soft = try fixture.verification(Self.checker(timeout: .milliseconds(500), warnings: warnings))
        #expect(try await soft.verifyTransaction(.init(signedTransaction: bought.signedTransaction)).status == 0)
        #expect(try await soft.verifyReceipt(.init(receiptData: bought.receiptData)).status == 0)
        #expect(warnings.withLockedValue { $0 }.contains { $0.contains("could not be reached") && $0.contains("soft-fail") })

        let hard = try fixture.verification(Self.checker(hardFail: true, timeout: .milliseconds(500)))
        let error = await #expect(throws: RPCError.self) {
            _ = try await hard.verifyTransaction(.init(signedTransaction: bought.signedTransaction))
        }
        #expect(error?.knownCode == .unavailable && error?.reason == "revocationUnknown")
        let receiptError = await #expect(throws: RPCError.self) { _ = try await hard.verifyReceipt(.init(receiptData: bought.receiptData)) }
        #expect(receiptError?.knownCode == .unavailable && receiptError?.reason == "revocationUnknown")
    }

    @Test func aSilentResponderIsGivenUpOnAfterTheTimeout() async throws {
        // A socket that accepts connections (the kernel's backlog) and never answers.
        let silent = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(silent) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listening = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(silent, $0, length) == 0 && getsockname(silent, $0, &length) == 0 }
        }
        #expect(listening && listen(silent, 16) == 0)
        let fixture = try await Fixture(responder: "http://127.0.0.1:\(UInt16(bigEndian: address.sin_port))/ocsp")
        let bought = try fixture.buy()
        let hard = try fixture.verification(Self.checker(hardFail: true, timeout: .milliseconds(300)))
        let started = Date()
        let error = await #expect(throws: RPCError.self) {
            _ = try await hard.verifyTransaction(.init(signedTransaction: bought.signedTransaction))
        }
        #expect(error?.reason == "revocationUnknown")
        // Bounded by the checker's timeout, not swift-certificates' 10 s cap for a whole chain.
        #expect(Date().timeIntervalSince(started) < 8)
    }

    @Test func theResponderAnswersUnknownForSerialsItNeverIssuedAndRefusesForeignIssuers() async throws {
        let fixture = try await Fixture()
        let pki = fixture.directory.appendingPathComponent("sim-pki")
        let intermediate = try Certificate(derEncoded: Array(try Data(contentsOf: pki.appendingPathComponent("jws-intermediate.der"))))
        let other = try JWSSigningPKI.generate()
        let stranger = try Self.request(serial: other.leaf.serialNumber, issuer: intermediate)
        #expect(OCSPMessages.summary(ofResponse: fixture.simulator.ocsp.respond(to: stranger))?.status == .unknown)
        let foreign = try Self.request(serial: other.leaf.serialNumber, issuer: other.intermediate)
        #expect(fixture.simulator.ocsp.respond(to: foreign) == OCSPMessages.failure(status: 6))
        #expect(fixture.simulator.ocsp.respond(to: [0x30, 0x00]) == OCSPMessages.failure(status: 1))
        #expect(throws: RPCError.self) { _ = try fixture.simulator.ocsp.revoke("apple-root", nowMs: 0) }
    }

    // MARK: requests built here, independently of swift-certificates' internal ones

    static func requestBytes(for name: String, in directory: URL) throws -> [UInt8] {
        let pki = directory.appendingPathComponent("sim-pki")
        func cert(_ file: String) throws -> Certificate { try Certificate(derEncoded: Array(try Data(contentsOf: pki.appendingPathComponent(file)))) }
        let issuerFile = name == "jws-intermediate" ? "jws-root.der" : "jws-intermediate.der"
        return try request(serial: try cert("\(name).der").serialNumber, issuer: try cert(issuerFile))
    }

    /// OCSPRequest { TBSRequest { requestList { Request { CertID (SHA-1) } } } }.
    static func request(serial: Certificate.SerialNumber, issuer: Certificate) throws -> [UInt8] {
        var name = DER.Serializer()
        try name.serialize(issuer.subject)
        var out = DER.Serializer()
        try out.appendConstructedNode(identifier: .sequence) { request in
            try request.appendConstructedNode(identifier: .sequence) { tbs in
                try tbs.appendConstructedNode(identifier: .sequence) { list in
                    try list.appendConstructedNode(identifier: .sequence) { single in
                        try single.appendConstructedNode(identifier: .sequence) { certID in
                            try certID.appendConstructedNode(identifier: .sequence) { algorithm in
                                try algorithm.serialize(try ASN1ObjectIdentifier(dotRepresentation: "1.3.14.3.2.26"))
                            }
                            try certID.serialize(ASN1OctetString(contentBytes: Array(Insecure.SHA1.hash(data: name.serializedBytes))[...]))
                            try certID.serialize(
                                ASN1OctetString(contentBytes: Array(Insecure.SHA1.hash(data: Array(issuer.publicKey.subjectPublicKeyInfoBytes)))[...])
                            )
                            certID.appendPrimitiveNode(identifier: .integer) { $0.append(contentsOf: serial.bytes) }
                        }
                    }
                }
            }
        }
        return out.serializedBytes
    }
}
