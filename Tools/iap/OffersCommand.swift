import ArgumentParser
import Foundation
import IAPProtocol
import JSONRPC

/// `iap offers list|eligible|sign|define|remove`: subscription offers, who may redeem them, their signatures.
struct OffersCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "offers", abstract: "Subscription offers: list, your eligibility, a signed offer; admin: define and remove.",
        subcommands: [List.self, Eligible.self, Sign.self, Define.self, Remove.self])

    static func describe(_ offer: SubscriptionOffer) -> [String] {
        let rule = offer.eligibility.kind == .subscribedAtMost ? "subscribedAtMost \(offer.eligibility.times ?? 0)" : offer.eligibility.kind.rawValue
        return [offer.offerId, offer.type, rule, offer.startsAtMs.map(isoTime) ?? "-", offer.endsAtMs.map(isoTime) ?? "-"]
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "A subscription's offers (catalog.getProducts).")
        @Argument(help: "Product id.") var productId: String
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(.catalog, CatalogGetProducts.self, .init(productIds: [productId])) { result in
                guard let product = result.products.first else { return "no product \(productId)" }
                let offers = product.offers ?? []
                return offers.isEmpty
                    ? "\(productId) has no offers" : table(["offer", "type", "eligibility", "starts", "ends"], offers.map(OffersCommand.describe))
            }
        }
    }

    struct Eligible: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Which of a subscription's offers you may redeem (fulfillment.offerEligibility).")
        @Argument(help: "Product id.") var productId: String
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentOfferEligibility.self, .init(session: try client.requireSession(), productId: productId)
            ) { result in
                table(["offer", "eligible", "why not"], result.offers.map { [$0.offerId, $0.eligible ? "yes" : "no", $0.reason ?? ""] })
                    + "\nintroductory offer: \(result.introductoryOfferEligible ? "eligible" : "not eligible")"
                    + (result.introductoryOfferReason.map { " (\($0))" } ?? "")
            }
        }
    }

    struct Sign: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "A promotional offer signed for you (fulfillment.signOffer); --json prints what `iap sim buy --offer` takes.")
        @Argument(help: "Product id.") var productId: String
        @Argument(help: "Offer id.") var offerId: String
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentSignOffer.self, .init(session: try client.requireSession(), productId: productId, offerId: offerId)
            ) { "signed \($0.offerId) for \($0.productId): key \($0.keyId), nonce \($0.nonce), timestamp \($0.timestamp)" }
        }
    }

    struct Define: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Admin: add or replace one offer of a subscription (catalog.setOffers).")
        @Argument(help: "Product id (an auto-renewable).") var productId: String
        @Argument(help: "Offer id, as set up in App Store Connect.") var offerId: String
        @Option(help: "anyone, lapsed, neverSubscribed or subscribedAtMost.") var rule: String = "anyone"
        @Option(help: "subscribedAtMost: the most periods paid for.") var times: Int?
        @Option(help: "Signed from (ISO 8601, e.g. 2026-12-01T00:00:00Z).") var starts: String?
        @Option(help: "Signed until (ISO 8601).") var ends: String?
        @OptionGroup var admin: CatalogCommand.Admin
        @OptionGroup var client: ClientOptions

        func validate() throws {
            guard OfferEligibilityKind(rawValue: rule) != nil else {
                throw ValidationError("--rule must be one of \(OfferEligibilityKind.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            for date in [starts, ends].compactMap({ $0 }) where ISO8601DateFormatter().date(from: date) == nil {
                throw ValidationError("\(date) is not an ISO 8601 time like 2026-12-01T00:00:00Z")
            }
        }

        func run() async throws {
            let call = ServiceCall(options: client)
            let current = await call.call(.catalog, CatalogGetProducts.self, .init(productIds: [productId])).result
            guard let product = current.products.first else { fail("no product \(productId)", exit: ExitCodes.refused) }
            func ms(_ text: String?) -> Int64? {
                text.flatMap { ISO8601DateFormatter().date(from: $0) }.map { Int64($0.timeIntervalSince1970 * 1000) }
            }
            let offer = SubscriptionOffer(
                offerId: offerId, eligibility: .init(kind: OfferEligibilityKind(rawValue: rule)!, times: times), startsAtMs: ms(starts),
                endsAtMs: ms(ends))
            var offers = (product.offers ?? []).filter { $0.offerId != offerId }
            offers.append(offer)
            await call.run(.catalog, CatalogSetOffers.self, .init(adminToken: try admin.token(), productId: productId, offers: offers)) { _ in
                "\(productId): offer \(offerId) (\(rule)) saved; \(offers.count) offer(s)"
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Admin: remove one offer of a subscription (catalog.setOffers).")
        @Argument(help: "Product id.") var productId: String
        @Argument(help: "Offer id.") var offerId: String
        @OptionGroup var admin: CatalogCommand.Admin
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let call = ServiceCall(options: client)
            let current = await call.call(.catalog, CatalogGetProducts.self, .init(productIds: [productId])).result
            guard let product = current.products.first else { fail("no product \(productId)", exit: ExitCodes.refused) }
            let offers = (product.offers ?? []).filter { $0.offerId != offerId }
            guard offers.count < (product.offers ?? []).count else { fail("\(productId) has no offer \(offerId)", exit: ExitCodes.refused) }
            await call.run(.catalog, CatalogSetOffers.self, .init(adminToken: try admin.token(), productId: productId, offers: offers)) { _ in
                "\(productId): offer \(offerId) removed"
            }
        }
    }
}
