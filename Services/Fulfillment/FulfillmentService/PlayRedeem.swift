import Foundation
import IAPProtocol
import JSONRPC

/// Google Play purchases in a redeem: nothing the device says is trusted; each purchase token is only a name for Google
/// to look up (through verification's Play Developer API client), and what Google answers is what is granted.
extension FulfillmentService {
    /// At most this many characters of a purchase token (Google's are a few hundred).
    static let maxPurchaseTokenLength = 4_096

    /// A Google Play order id (`GPA.1234-5678-9012-34567`, a renewal's with `..N`) or purchase token: Google's characters
    /// (letters, digits, '.', '_', '-'), not only dots, at most `maxPurchaseTokenLength`.
    static func isPlayId(_ id: String, maxLength: Int = maxPurchaseTokenLength) -> Bool {
        (1...maxLength).contains(id.utf8.count) && id.utf8.contains { $0 != UInt8(ascii: ".") }
            && id.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) || "._-".utf8.contains($0) }
    }

    /// At most `max` purchases (each is a call to Google), each id and token of Google's characters (letters, digits, '.',
    /// '_', '-', not only dots: nothing that could change the path of the URL asked), a package name of Android's.
    static func checkPlay(_ purchases: [GooglePlayPurchase], max: Int) throws(RPCError) {
        guard purchases.count <= max else {
            throw RPCError.invalidParams(
                "at most \(max) Google Play purchases per call (each is a call to Google)", field: "googlePlay", reason: "tooMany")
        }
        for p in purchases {
            guard isPlayId(p.productId, maxLength: 150), isPlayId(p.purchaseToken), p.packageName.map({ isPlayId($0, maxLength: 255) }) ?? true
            else {
                throw RPCError.invalidParams(
                    "each Google Play purchase needs its productId and purchaseToken (letters, digits, '.', '_', '-'; at most \(maxPurchaseTokenLength))",
                    field: "googlePlay", reason: "invalidValue")
            }
        }
    }

    /// Each purchase as Google reports it now, checked concurrently. The catalog says which product a Play id is (its
    /// `googlePlay` ids, `PlayCatalogEntry`) and whether it is a subscription (which of Google's two APIs to ask); an id
    /// it does not sell (or a base plan it does not) is `unknownProduct`, a token Google does not know or refuses, or
    /// a purchase still pending payment, is `rejected` (neither finishable); a failure to reach Google fails the call with
    /// nothing written.
    func verifiedPlayPurchases(_ given: [GooglePlayPurchase], accountId: String) async throws(RPCError)
        -> ([VerifiedPurchase], [TransactionResult])
    {
        var refs: [GooglePlayPurchase] = []
        for ref in given where !refs.contains(where: { $0.purchaseToken == ref.purchaseToken }) { refs.append(ref) }
        // Each token is a call to Google, out of the account's budget of calls to the stores (the App Store's too): a flood of
        // made-up tokens must not spend the API quota that real redeems and acknowledgements need.
        if let wait = appleCalls.take(accountId, cost: Double(refs.count)) {
            throw RPCError.rateLimited(
                retryAfterMs: Int64((wait * 1000).rounded(.up)), detail: "this account's budget of calls to the stores is spent")
        }
        guard let internalToken = configuration.internalToken else {
            throw RPCError(
                code: .unavailable, message: "Google Play purchases need the suite's internal token on fulfillment (--internal-token)",
                reason: .playAPINotConfigured)
        }
        let catalog = try await playCatalog(refs.map(\.productId))
        var verified: [VerifiedPurchase] = []
        var rejected: [TransactionResult] = []
        func refuse(_ ref: GooglePlayPurchase, _ outcome: RedeemOutcome) {
            rejected.append(
                TransactionResult(
                    transactionId: ref.purchaseToken, originalTransactionId: ref.purchaseToken, productId: ref.productId, outcome: outcome,
                    finishable: false))
        }
        var asks: [(GooglePlayPurchase, PlayPurchaseReference)] = []
        for ref in refs {
            guard let first = catalog[ref.productId]?.first else {
                refuse(ref, .unknownProduct)
                continue
            }
            let kind = first.isSubscription ? PlayPurchaseKind.subscription : .product
            asks.append(
                (
                    ref,
                    PlayPurchaseReference(
                        internalToken: internalToken, packageName: ref.packageName, productId: ref.productId, purchaseToken: ref.purchaseToken,
                        kind: kind)
                ))
        }
        let answers = await withTaskGroup(of: (Int, Result<VerifiedPlayPurchase, RPCError>).self) { group in
            for (i, ask) in asks.enumerated() {
                group.addTask {
                    do throws(RPCError) {
                        return (i, .success(try await self.dependencies.verifyPlayPurchase(ask.1)))
                    } catch {
                        return (i, .failure(error))
                    }
                }
            }
            var out = [Result<VerifiedPlayPurchase, RPCError>](repeating: .failure(.internalError()), count: asks.count)
            for await (i, answer) in group { out[i] = answer }
            return out
        }
        let now = clock.nowMs
        for (i, answer) in answers.enumerated() {
            let ref = asks[i].0
            switch answer {
            case .success(let play) where play.entitles || (play.kind == .product && play.state == "CANCELLED"):
                // What Google says gives access now is granted; a one-time purchase it cancelled is recorded as revoked.
                guard let product = PlayCatalogEntry.choose(catalog[ref.productId] ?? [], basePlanId: play.basePlanId) else {
                    refuse(ref, .unknownProduct)
                    continue
                }
                verified.append(VerifiedPurchase(play: play, catalogProductId: product.productId, nowMs: now))
            case .success:
                // Pending (not paid yet), or a subscription that gives no access now (expired, on hold, paused): nothing.
                refuse(ref, .rejected)
            case .failure(let error) where error.knownCode.map { [.notFound, .invalidReceipt, .invalidParams].contains($0) } ?? false:
                refuse(ref, .rejected)
            case .failure(let error):
                throw error
            }
        }
        return (verified, rejected)
    }
}

extension GrantRules {
    /// The Google Play purchases to acknowledge after a redeem, by purchase token with their outbox payload: each granted,
    /// restored or already granted here (so a redeem retried after a lost acknowledgement owes it again) that Google does not
    /// yet have as acknowledged, or for one-time products that are not permanent as consumed (consuming acknowledges, and
    /// lets the customer buy it again).
    static func playAcknowledgements(_ planned: [PlannedPurchase], results: [TransactionResult]) -> [(String, String)] {
        let kept = Set(
            results.filter { [.granted, .restored, .alreadyGranted].contains($0.outcome) }.map { "\($0.transactionId) \($0.originalTransactionId)" })
        var owed: [(String, String)] = []
        for item in planned {
            guard let play = item.purchase.play, kept.contains("\(item.purchase.transactionId) \(item.purchase.originalTransactionId)"),
                !owed.contains(where: { $0.0 == play.purchaseToken })
            else { continue }
            // Consumed unless it grants something for good: coins and passes (time-limited) can be bought again.
            let consume = play.kind == .product && { if case .permanent = item.rule { false } else { true } }()
            guard consume ? !play.consumed : !play.acknowledged else { continue }
            let payload = PlayFacts.Owed(packageName: play.packageName, productId: play.productId, kind: play.kind, consume: consume)
            guard let json = try? JSONEncoder().encode(payload) else { continue }
            owed.append((play.purchaseToken, String(decoding: json, as: UTF8.self)))
        }
        return owed
    }

    /// The packages of the Google Play subscriptions granted or restored (token, package), for the subscription sweep.
    static func playSubscriptionPackages(_ planned: [PlannedPurchase], results: [TransactionResult]) -> [(String, String)] {
        let kept = Set(results.filter { [.granted, .restored].contains($0.outcome) }.map(\.originalTransactionId))
        var packages: [(String, String)] = []
        for item in planned {
            guard let play = item.purchase.play, play.kind == .subscription, kept.contains(item.purchase.originalTransactionId),
                !packages.contains(where: { $0.0 == play.purchaseToken })
            else { continue }
            packages.append((play.purchaseToken, play.packageName))
        }
        return packages
    }
}
