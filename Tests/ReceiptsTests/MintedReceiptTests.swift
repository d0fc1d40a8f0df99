import Crypto
import Foundation
import Receipts
import Testing
import X509

/// Receipts minted by the library under a test PKI, verified by the library: the accepted shapes and
/// every refusal, each with its status and reason.
@Suite struct MintedReceiptTests {
    static let pki = try! ReceiptSigningPKI.generate()
    static let otherPKI = try! ReceiptSigningPKI.generate(
        {
            var o = ReceiptSigningPKI.Options(); o.name = "Forged"; return o
        }())
    static let verifier = ReceiptVerifier(trust: ReceiptTrust(roots: ShippedTrust.appleRoots + [pki.root]))

    static let device = UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!

    static func receipt(bundleId: String = "com.example.game", created: String = "2026-03-01T12:00:00Z", purchases: Int = 5) -> Receipt {
        var r = Receipt()
        r.receiptType = "ProductionSandbox"
        r.appItemId = 0
        r.bundleId = bundleId
        r.applicationVersion = "3"
        r.opaqueValue = Array(0..<16)
        let deviceBytes = withUnsafeBytes(of: device.uuid) { Array($0) }
        let bundleDER: [UInt8] = [0x0C, UInt8(bundleId.utf8.count)] + Array(bundleId.utf8)
        r.sha1Hash = Array(Insecure.SHA1.hash(data: deviceBytes + r.opaqueValue + bundleDER))
        r.creationDateMs = ReceiptDate.parse(created)
        r.originalApplicationVersion = "1"
        r.inApp = (0..<purchases).map { i in
            var p = InAppPurchaseReceipt()
            p.quantity = 1
            p.productId = "coins.\(i)"
            p.transactionId = "\(1000 + i)"
            p.originalTransactionId = "\(1000 + i)"
            p.purchaseDateMs = ReceiptDate.parse("2026-02-01T10:00:0\(i)Z")
            p.originalPurchaseDateMs = p.purchaseDateMs
            p.productType = 1
            p.webOrderLineItemId = 0
            return p
        }
        return r
    }

    private func outcome(
        _ bytes: [UInt8], _ options: ReceiptVerifier.Options = .init(),
        verifier: ReceiptVerifier = MintedReceiptTests.verifier
    ) async -> Result<VerifiedReceipt, ReceiptFailure> {
        await verifier.verify(bytes, options: options)
    }

    @Test(arguments: [
        (ReceiptBuilder.Digest.sha256, ReceiptBuilder.SignatureOID.rsaEncryption),
        (.sha256, .withDigest), (.sha1, .rsaEncryption), (.sha1, .withDigest),
    ])
    func validReceiptsVerify(_ digest: ReceiptBuilder.Digest, _ oid: ReceiptBuilder.SignatureOID) async throws {
        let original = Self.receipt()
        let bytes = try Self.pki.sign(original, digest: digest, signatureOID: oid)
        guard
            case .success(let verified) = await outcome(
                bytes,
                .init(
                    bundleIds: ["com.example.game"],
                    deviceIdentifier: Self.device.uuidString))
        else {
            Issue.record("refused a valid receipt")
            return
        }
        #expect(verified.environment == "Sandbox")
        var expected = original
        expected.bundleIdDER = [0x0C, 16] + Array("com.example.game".utf8)
        #expect(verified.receipt == expected)  // every field round-trips
    }

    @Test func aTamperedPayloadFailsTheSignature() async throws {
        var bytes = try Self.pki.sign(Self.receipt())
        let needle = Array("coins.3".utf8)
        let at = (0...(bytes.count - needle.count)).first { Array(bytes[$0..<($0 + needle.count)]) == needle }!
        bytes[at + 6] = UInt8(ascii: "9")  // still well-formed, now "coins.9"
        #expect(await outcome(bytes) == .failure(.signatureInvalid))
    }

    @Test func aChainToAnotherRootIsUntrusted() async throws {
        // Same names, same markers, different root: not ours.
        #expect(await outcome(try Self.otherPKI.sign(Self.receipt())) == .failure(.untrustedChain))
    }

    @Test func aSwappedSignerFailsTheSignature() async throws {
        // The other PKI's leaf signed the payload, but our chain is presented.
        let payload = ReceiptBuilder.payload(Self.receipt())
        let bytes = try ReceiptBuilder.sign(
            payload: payload, key: Self.otherPKI.leafKey, signer: Self.pki.leaf,
            certificates: [Self.pki.leaf, Self.pki.intermediate])
        #expect(await outcome(bytes) == .failure(.signatureInvalid))
    }

    @Test func missingMarkersAreUntrusted() async throws {
        var o = ReceiptSigningPKI.Options()
        o.leafMarker = false
        let unmarkedLeaf = try ReceiptSigningPKI.generate(o)
        o.leafMarker = true
        o.intermediateMarker = false
        let unmarkedIntermediate = try ReceiptSigningPKI.generate(o)
        let verifier = ReceiptVerifier(trust: ReceiptTrust(roots: [unmarkedLeaf.root, unmarkedIntermediate.root]))
        #expect(await outcome(try unmarkedLeaf.sign(Self.receipt()), verifier: verifier) == .failure(.untrustedChain))
        #expect(await outcome(try unmarkedIntermediate.sign(Self.receipt()), verifier: verifier) == .failure(.untrustedChain))
    }

    @Test func validityIsJudgedAtTheReceiptsCreationDate() async throws {
        var o = ReceiptSigningPKI.Options()
        o.leafNotAfter = Date(timeIntervalSince1970: 1_700_000_000)  // 2023-11-14: long expired now
        let expired = try ReceiptSigningPKI.generate(o)
        let verifier = ReceiptVerifier(trust: ReceiptTrust(roots: [expired.root]))
        // Created while the leaf was valid: still a valid record today.
        let old = try expired.sign(Self.receipt(created: "2023-06-01T00:00:00Z"))
        guard case .success = await outcome(old, verifier: verifier) else {
            Issue.record("refused a receipt created while its chain was valid")
            return
        }
        // Created after the leaf expired: refused.
        let late = try expired.sign(Self.receipt(created: "2024-06-01T00:00:00Z"))
        #expect(await outcome(late, verifier: verifier) == .failure(.untrustedChain))
        // Before the chain existed: refused too.
        let early = try expired.sign(Self.receipt(created: "2019-06-01T00:00:00Z"))
        #expect(await outcome(early, verifier: verifier) == .failure(.untrustedChain))
    }

    @Test func bundleAndDeviceChecks() async throws {
        let bytes = try Self.pki.sign(Self.receipt())
        #expect(await outcome(bytes, .init(bundleIds: ["com.example.other"])) == .failure(.bundleMismatch))
        #expect(await outcome(bytes, .init(deviceIdentifier: UUID().uuidString)) == .failure(.deviceMismatch))
        #expect(await outcome(bytes, .init(deviceIdentifier: "not hex or base64!")) == .failure(.deviceMismatch))
        // macOS: a MAC address as hex.
        var mac = Self.receipt()
        let macBytes: [UInt8] = [0x00, 0x1b, 0x63, 0x84, 0x45, 0xe6]
        mac.sha1Hash = Array(Insecure.SHA1.hash(data: macBytes + mac.opaqueValue + [0x0C, 16] + Array("com.example.game".utf8)))
        let macReceipt = try Self.pki.sign(mac)
        guard case .success = await outcome(macReceipt, .init(deviceIdentifier: "00:1b:63:84:45:e6")) else {
            Issue.record("refused a matching MAC address")
            return
        }
        guard case .success = await outcome(macReceipt, .init(deviceIdentifier: Data(macBytes).base64EncodedString())) else {
            Issue.record("refused a matching base64 MAC address")
            return
        }
    }

    @Test func base64WithLineBreaksOrStrayCharactersDecodesAsPlainBase64() async throws {
        let bytes = try Self.pki.sign(Self.receipt())
        let plain = Data(bytes).base64EncodedString()
        let wrapped = Data(bytes).base64EncodedString(options: [.lineLength76Characters, .endLineWithCarriageReturn, .endLineWithLineFeed])
        #expect(wrapped.contains("\r\n"))
        guard case .success(let expected) = await Self.verifier.verify(bytes, options: .init()) else {
            Issue.record("the receipt does not verify")
            return
        }
        for text in [plain, wrapped, " " + plain + "\n", plain.replacingOccurrences(of: "A", with: "A*")] {
            let decoded = try await Self.verifier.verify(base64: text, options: .init()).get()
            #expect(decoded.receipt == expected.receipt && decoded.environment == expected.environment)
        }
        #expect(await Self.verifier.verify(base64: "***", options: .init()) == .failure(.malformed))
    }

    @Test func truncatedAndBitFlippedReceiptsFailCleanly() async throws {
        let bytes = try Self.pki.sign(Self.receipt(purchases: 2))
        var accepted = 0
        for length in stride(from: 0, to: bytes.count, by: 7) {
            if case .success = await outcome(Array(bytes[..<length])) { accepted += 1 }
        }
        #expect(accepted == 0)
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<300 {
            var mutated = bytes
            let i = Int.random(in: 0..<mutated.count, using: &rng)
            mutated[i] ^= UInt8(1 << Int.random(in: 0..<8, using: &rng))
            if case .success(let v) = await outcome(mutated) {
                // A flip can only be harmless where the signature does not reach (e.g. inside the
                // unsigned certificate padding); the decoded receipt must then be the original.
                #expect(v.receipt.inApp.count == 2)
            }
        }
        #expect(await outcome([]) == .failure(.malformed))
        #expect(await Self.verifier.verify(base64: "not base64 at all", options: .init()) == .failure(.malformed))
    }

    @Test func hostileStructuresHitTheLimits() throws {
        // 10,000 nested SEQUENCEs, indefinite length: refused by depth before any tree is built.
        let deep = Array(repeating: [UInt8]([0x30, 0x80]), count: 10_000).flatMap { $0 } + Array(repeating: 0, count: 20_000)
        #expect(throws: ReceiptContainer.ParseError.limits(.tooDeep)) { try ReceiptContainer.parse(deep) }
        // 200,000 tiny elements.
        let wide = DERWriterForTests.sequence(Array(repeating: [0x05, 0x00], count: 200_000).flatMap { $0 })
        #expect(throws: ReceiptContainer.ParseError.limits(.tooManyElements)) { try ReceiptContainer.parse(wide) }
        // A length that claims more than there is.
        #expect(throws: ReceiptContainer.ParseError.limits(.truncated)) { try ReceiptContainer.parse([0x30, 0x84, 0x7F, 0xFF, 0xFF, 0xFF, 0x00]) }
        var big = ASN1Limits()
        big.maxBytes = 16
        #expect(throws: ReceiptContainer.ParseError.limits(.tooLarge)) { try ReceiptContainer.parse(Array(repeating: 0, count: 17), limits: big) }
    }
}

enum DERWriterForTests {
    static func sequence(_ content: [UInt8]) -> [UInt8] {
        let n = content.count
        return [0x30, 0x84, UInt8(n >> 24 & 0xFF), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)] + content
    }
}

extension Result: @retroactive Equatable where Success == VerifiedReceipt, Failure == ReceiptFailure {
    public static func == (a: Self, b: Self) -> Bool {
        switch (a, b) {
        case let (.failure(x), .failure(y)): return x == y
        default: return false
        }
    }
}
