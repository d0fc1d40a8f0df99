import Foundation
import Receipts
import Testing

@Suite struct SignedPayloadTests {
    static let pki = try! JWSSigningPKI.generate()
    static let other = try! JWSSigningPKI.generate(name: "Forged")
    static let verifier = SignedPayloadVerifier(roots: ShippedTrust.appleRoots + [pki.root])

    static let payload = Array(
        #"{"transactionId":"2000000123","originalTransactionId":"2000000100","bundleId":"com.example.game","productId":"coins.100","type":"Consumable","purchaseDate":1772366400000,"quantity":1,"environment":"Sandbox","signedDate":1772366401000}"#
            .utf8)

    private func failure(_ jws: String) async -> JWSFailure? {
        if case .failure(let f) = await Self.verifier.verify(jws) { return f }
        return nil
    }

    @Test func aValidChainPassesAndReturnsThePayload() async throws {
        let jws = try Self.pki.sign(payload: Self.payload)
        guard case .success(let payload) = await Self.verifier.verify(jws) else { Issue.record("refused"); return }
        #expect(payload == Self.payload)
    }

    @Test func otherAlgorithmsAreRefused() async throws {
        for alg in ["none", "HS256", "ES384", "RS256", "es256"] {
            #expect(await failure(try Self.pki.sign(payload: Self.payload, alg: alg)) == .wrongAlgorithm, "\(alg)")
        }
    }

    @Test func chainsOfOtherLengthsAreRefused() async throws {
        let p = Self.pki
        #expect(await failure(try p.sign(payload: Self.payload, x5c: [p.leaf, p.root])) == .invalidChain)
        #expect(await failure(try p.sign(payload: Self.payload, x5c: [p.leaf, p.intermediate, p.root, p.root])) == .invalidChain)
        #expect(await failure(try p.sign(payload: Self.payload, x5c: [])) == .invalidChain)
    }

    @Test func anotherRootIsRefused() async throws {
        #expect(await failure(try Self.other.sign(payload: Self.payload)) == .untrustedChain)
        // Our root presented, but the leaf and intermediate are someone else's: the links do not verify.
        let o = Self.other
        let mixed = try o.sign(payload: Self.payload, x5c: [o.leaf, o.intermediate, Self.pki.root])
        #expect(await failure(mixed) == .untrustedChain)
    }

    @Test func missingMarkersAreRefused() async throws {
        let unmarked = try JWSSigningPKI.generate(name: "Unmarked", markers: false)
        let verifier = SignedPayloadVerifier(roots: [unmarked.root])
        guard case .failure(let f) = await verifier.verify(try unmarked.sign(payload: Self.payload)) else {
            Issue.record("accepted an unmarked chain"); return
        }
        #expect(f == .untrustedChain)
    }

    @Test func aBadSignatureIsRefused() async throws {
        let jws = try Self.pki.sign(payload: Self.payload)
        var parts = jws.split(separator: ".").map(String.init)
        // Payload swapped after signing.
        parts[1] = JWSSigningPKI.base64URL(Array(#"{"transactionId":"1","signedDate":1772366401000}"#.utf8))
        #expect(await failure(parts.joined(separator: ".")) == .signatureInvalid)
        // Signature of the wrong length.
        #expect(await failure(jws + "AAAA") == .signatureInvalid)
    }

    @Test func validityIsJudgedAtSignedDate() async throws {
        let old = try JWSSigningPKI.generate(
            name: "Old", notBefore: Date(timeIntervalSince1970: 1_600_000_000),
            notAfter: Date(timeIntervalSince1970: 1_700_000_000))
        let verifier = SignedPayloadVerifier(roots: [old.root])
        let during = Array(#"{"signedDate":1650000000000}"#.utf8)
        let after = Array(#"{"signedDate":1750000000000}"#.utf8)
        guard case .success = await verifier.verify(try old.sign(payload: during)) else { Issue.record("refused"); return }
        guard case .failure(.untrustedChain) = await verifier.verify(try old.sign(payload: after)) else { Issue.record("accepted"); return }
    }

    @Test func malformedInputIsRefusedCleanly() async throws {
        for junk in ["", "a.b", "a.b.c.d", "!!!.???.***", String(repeating: "A", count: 70_000) + ".a.b"] {
            #expect(await failure(junk) == .malformed, "\(junk.prefix(20))")
        }
        // signedDate missing.
        #expect(await failure(try Self.pki.sign(payload: Array(#"{"transactionId":"1"}"#.utf8))) == .malformed)
    }
}
