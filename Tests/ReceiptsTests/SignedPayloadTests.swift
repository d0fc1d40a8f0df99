import Foundation
import Testing

@testable import Receipts

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

/// Chains built as Apple's server libraries build them, and Xcode's StoreKit-testing signatures.
@Suite struct SignedPayloadChainBuildingTests {
    static let pki = try! JWSSigningPKI.generate(name: "Test Anchor")
    static let other = try! JWSSigningPKI.generate(name: "Elsewhere")
    static let xcode = try! JWSSigningPKI.xcodeStoreKitTesting()

    static func payload(environment: String) -> [UInt8] {
        Array(
            #"{"transactionId":"0","originalTransactionId":"0","bundleId":"com.example.game","productId":"coins.100","environment":"\#(environment)","signedDate":1772366401000}"#
                .utf8)
    }

    static func outcome(_ verifier: SignedPayloadVerifier, _ jws: String) async -> JWSFailure? {
        if case .failure(let f) = await verifier.verify(jws) { return f }
        return nil
    }

    @Test func theLastX5cCertificateIsAHintTheIntermediateMustChainToAConfiguredRoot() async throws {
        let verifier = SignedPayloadVerifier(roots: [Self.pki.root])
        let p = Self.pki
        let sandbox = Self.payload(environment: "Sandbox")
        // Another root, or any certificate at all, in the last place: the chain is built from the trust store.
        #expect(await Self.outcome(verifier, try p.sign(payload: sandbox, x5c: [p.leaf, p.intermediate, Self.other.root])) == nil)
        #expect(await Self.outcome(verifier, try p.sign(payload: sandbox, x5c: [p.leaf, p.intermediate, p.leaf])) == nil)
        // The configured root presented last, but the intermediate is signed by another root: refused.
        let o = Self.other
        #expect(await Self.outcome(verifier, try o.sign(payload: sandbox, x5c: [o.leaf, o.intermediate, p.root])) == .untrustedChain)
        // The presented "root" is never trusted for being there.
        #expect(await Self.outcome(verifier, try o.sign(payload: sandbox)) == .untrustedChain)
    }

    @Test func xcodeSignedPayloadsAreAcceptedOnlyWithAllowXcodeAndOnlyForTheXcodeEnvironment() async throws {
        let strict = SignedPayloadVerifier(roots: [Self.pki.root])
        let xcodeAllowed = SignedPayloadVerifier(roots: [Self.pki.root], allowXcode: true)
        let x = Self.xcode
        let signed = try x.sign(payload: Self.payload(environment: "Xcode"), x5c: [x.leaf])
        #expect(await Self.outcome(strict, signed) == .invalidChain)
        #expect(await Self.outcome(xcodeAllowed, signed) == nil)
        #expect(await Self.outcome(xcodeAllowed, try x.sign(payload: Self.payload(environment: "LocalTesting"), x5c: [x.leaf])) == nil)
        // A self-signed certificate never vouches for Sandbox or Production purchases.
        for environment in ["Production", "Sandbox"] {
            #expect(
                await Self.outcome(xcodeAllowed, try x.sign(payload: Self.payload(environment: environment), x5c: [x.leaf])) == .untrustedChain,
                "\(environment)")
        }
        // A one-entry x5c whose certificate is not self-signed (a real leaf alone), or a signature by another key.
        let p = Self.pki
        #expect(
            await Self.outcome(xcodeAllowed, try p.sign(payload: Self.payload(environment: "Xcode"), x5c: [p.leaf])) == .untrustedChain)
        let impostor = try JWSSigningPKI.xcodeStoreKitTesting()
        let mismatched = JWSSigningPKI(root: x.leaf, intermediate: x.leaf, leaf: x.leaf, leafKey: impostor.leafKey)
        #expect(
            await Self.outcome(xcodeAllowed, try mismatched.sign(payload: Self.payload(environment: "Xcode"), x5c: [x.leaf]))
                == .signatureInvalid)
    }
}

@Suite struct Base64URLTests {
    @Test func encodesAsFoundationDoesWithoutPaddingAndWithTheURLAlphabet() {
        var rng = SystemRandomNumberGenerator()
        for length in 0..<70 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let expected = Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
            #expect(JWSSigningPKI.base64URL(bytes) == expected, "\(length) bytes")
            #expect(SignedPayloadVerifier.base64URL(ArraySlice(Array(JWSSigningPKI.base64URL(bytes).utf8))) == bytes)
        }
    }
}
