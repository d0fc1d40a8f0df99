import Crypto
import CryptoExtras
import Foundation
import SwiftASN1
import X509

/// An Apple-shaped receipt-signing PKI of our own: an RSA root, a WWDR-like intermediate carrying
/// 1.2.840.113635.100.6.2.1 and a receipt-signing leaf carrying 1.2.840.113635.100.6.11.1. The
/// simulator keeps one; tests make variants (expired, unmarked, other roots) to check refusals.
public struct ReceiptSigningPKI: Sendable {
    public let root: Certificate
    public let intermediate: Certificate
    public let leaf: Certificate
    public let leafKey: _RSA.Signing.PrivateKey
    /// Kept so more leaves can be issued under the same chain (an expired one for negative tests).
    public let intermediateKey: _RSA.Signing.PrivateKey
    /// Kept where the PKI answers OCSP about its intermediate (the simulator); nil otherwise.
    public let rootKey: _RSA.Signing.PrivateKey?

    public init(
        root: Certificate, intermediate: Certificate, leaf: Certificate, leafKey: _RSA.Signing.PrivateKey,
        intermediateKey: _RSA.Signing.PrivateKey, rootKey: _RSA.Signing.PrivateKey? = nil
    ) {
        self.root = root
        self.intermediate = intermediate
        self.leaf = leaf
        self.leafKey = leafKey
        self.intermediateKey = intermediateKey
        self.rootKey = rootKey
    }

    /// The same chain with a new receipt-signing leaf valid only in `notBefore...notAfter`.
    public func withLeaf(notBefore: Date, notAfter: Date) throws -> ReceiptSigningPKI {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let leaf = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(key.publicKey), notValidBefore: notBefore, notValidAfter: notAfter,
            issuer: intermediate.subject, subject: self.leaf.subject, signatureAlgorithm: .sha256WithRSAEncryption,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                Certificate.Extension(oid: AppleMarkers.receiptSigning, critical: false, value: [0x05, 0x00])
            },
            issuerPrivateKey: .init(intermediateKey))
        return ReceiptSigningPKI(
            root: root, intermediate: intermediate, leaf: leaf, leafKey: key, intermediateKey: intermediateKey, rootKey: rootKey)
    }

    public struct Options: Sendable {
        public var name = "Simulated"
        public var notBefore = Date(timeIntervalSince1970: 1_577_836_800)  // 2020-01-01
        public var notAfter = Date(timeIntervalSince1970: 2_524_608_000)  // 2050-01-01
        /// The leaf's own window, when it should differ (an expired leaf, say).
        public var leafNotAfter: Date?
        public var leafMarker = true
        public var intermediateMarker = true
        public var keyBits = 2048
        /// Put in the leaf's and the intermediate's Authority Information Access (an OCSP responder).
        public var ocspURL: String?
        public init() {}
    }

    public static func generate(_ o: Options = .init()) throws -> ReceiptSigningPKI {
        let size: _RSA.Signing.KeySize = o.keyBits >= 3072 ? .bits3072 : .bits2048
        let rootKey = try _RSA.Signing.PrivateKey(keySize: size)
        let intermediateKey = try _RSA.Signing.PrivateKey(keySize: size)
        let leafKey = try _RSA.Signing.PrivateKey(keySize: size)
        let rootName = try DistinguishedName {
            CommonName("\(o.name) Root CA")
            OrganizationName("\(o.name) Store")
            CountryName("US")
        }
        let intermediateName = try DistinguishedName {
            CommonName("\(o.name) Worldwide Developer Relations Certification Authority")
            OrganizationName("\(o.name) Store")
            CountryName("US")
        }
        let leafName = try DistinguishedName {
            CommonName("\(o.name) Receipt Signing")
            OrganizationName("\(o.name) Store")
            CountryName("US")
        }
        let root = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(rootKey.publicKey), notValidBefore: o.notBefore,
            notValidAfter: o.notAfter, issuer: rootName, subject: rootName, signatureAlgorithm: .sha256WithRSAEncryption,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: .init(rootKey))
        let intermediate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(intermediateKey.publicKey), notValidBefore: o.notBefore,
            notValidAfter: o.notAfter, issuer: rootName, subject: intermediateName, signatureAlgorithm: .sha256WithRSAEncryption,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                if o.intermediateMarker { Certificate.Extension(oid: AppleMarkers.wwdrIntermediate, critical: false, value: [0x05, 0x00]) }
                if let url = o.ocspURL { AuthorityInformationAccess([.init(method: .ocspServer, location: .uniformResourceIdentifier(url))]) }
            },
            issuerPrivateKey: .init(rootKey))
        let leaf = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(leafKey.publicKey), notValidBefore: o.notBefore,
            notValidAfter: o.leafNotAfter ?? o.notAfter, issuer: intermediateName, subject: leafName,
            signatureAlgorithm: .sha256WithRSAEncryption,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                if o.leafMarker { Certificate.Extension(oid: AppleMarkers.receiptSigning, critical: false, value: [0x05, 0x00]) }
                if let url = o.ocspURL { AuthorityInformationAccess([.init(method: .ocspServer, location: .uniformResourceIdentifier(url))]) }
            },
            issuerPrivateKey: .init(intermediateKey))
        return ReceiptSigningPKI(
            root: root, intermediate: intermediate, leaf: leaf, leafKey: leafKey, intermediateKey: intermediateKey, rootKey: rootKey)
    }

    /// A signed receipt file for `receipt`, carrying the leaf and the intermediate (not the root).
    public func sign(
        _ receipt: Receipt, digest: ReceiptBuilder.Digest = .sha256,
        signatureOID: ReceiptBuilder.SignatureOID = .rsaEncryption
    ) throws -> [UInt8] {
        try ReceiptBuilder.sign(
            payload: ReceiptBuilder.payload(receipt), key: leafKey, signer: leaf,
            certificates: [leaf, intermediate], digest: digest, signatureOID: signatureOID)
    }
}
